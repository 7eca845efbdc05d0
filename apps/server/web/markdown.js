/* A small Markdown subset for model answers: paragraphs, ``` fences,
 * `inline code`, **bold** / __bold__, *italic* / _italic_, - and 1. lists,
 * # headings.  Model output never becomes HTML: this code makes every
 * element itself, from a fixed set of tags, with no attribute taken from the
 * text but a numbered list's start number, and the text goes in only as text
 * nodes (Element.append with strings).  An unclosed fence or emphasis is shown as far as
 * it goes, so a streamed answer renders at every step. */
"use strict";

const tkMarkdown = (() => {
  function el(tag, ...children) {
    const e = document.createElement(tag);
    e.append(...children); /* strings become text nodes */
    return e;
  }

  const INLINE = new RegExp([
    "(`+)([\\s\\S]+?)\\1",                 /* 1, 2: code span */
    "\\*\\*(\\S(?:[\\s\\S]*?\\S)?)\\*\\*",  /* 3: bold */
    "__(\\S(?:[\\s\\S]*?\\S)?)__",          /* 4: bold */
    "\\*(\\S(?:[\\s\\S]*?\\S)?)\\*",        /* 5: italic */
    "\\b_(\\S(?:[\\s\\S]*?\\S)?)_\\b",      /* 6: italic, not inside snake_case words */
  ].join("|"), "g");

  /* The nodes for one paragraph's, item's or heading's text. */
  function inline(text) {
    const out = [];
    const re = new RegExp(INLINE);
    let last = 0;
    for (let m; (m = re.exec(text));) {
      if (m.index > last) out.push(text.slice(last, m.index));
      if (m[1] !== undefined) out.push(el("code", m[2]));
      else if (m[3] !== undefined || m[4] !== undefined) out.push(el("strong", ...inline(m[3] ?? m[4])));
      else out.push(el("em", ...inline(m[5] ?? m[6])));
      last = re.lastIndex;
    }
    if (last < text.length) out.push(text.slice(last));
    return out;
  }

  const FENCE = /^\s*(`{3,}|~{3,})\s*([^\s`]*)/;
  const ITEM = /^\s*(?:([-*+])|(\d{1,9})[.)])\s+(.*)$/;
  const HEADING = /^(#{1,6})\s+(.*)$/;

  /* A DocumentFragment for the whole text. */
  function render(text) {
    const frag = document.createDocumentFragment();
    const lines = text.replace(/\r\n?/g, "\n").split("\n");
    let para = [];
    let list = null;
    const endPara = () => {
      if (para.length) frag.append(el("p", ...inline(para.join("\n"))));
      para = [];
    };
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i];
      const fence = FENCE.exec(line);
      if (fence) {
        endPara();
        list = null;
        const close = new RegExp("^\\s*\\" + fence[1][0] + "{" + fence[1].length + ",}\\s*$");
        const body = [];
        for (i++; i < lines.length && !close.test(lines[i]); i++) body.push(lines[i]);
        const block = el("div", el("pre", el("code", body.join("\n"))));
        block.className = "code";
        if (fence[2]) {
          const lang = el("span", fence[2]);
          lang.className = "lang";
          block.prepend(lang);
        }
        frag.append(block);
        continue;
      }
      const item = ITEM.exec(line);
      if (item) {
        endPara();
        const tag = item[1] ? "UL" : "OL";
        if (!list || list.tagName !== tag) {
          list = el(tag);
          if (item[2] !== undefined && +item[2] !== 1) list.start = +item[2];
          frag.append(list);
        }
        list.append(el("li", ...inline(item[3])));
        continue;
      }
      if (!line.trim()) {
        endPara();
        list = null;
        continue;
      }
      if (list && /^\s/.test(line)) { /* an indented line continues the item */
        list.lastElementChild.append("\n", ...inline(line.trim()));
        continue;
      }
      list = null;
      const heading = HEADING.exec(line);
      if (heading) {
        endPara();
        frag.append(el("h" + Math.min(6, heading[1].length + 2), ...inline(heading[2])));
        continue;
      }
      para.push(line);
    }
    endPara();
    return frag;
  }

  return { render };
})();
