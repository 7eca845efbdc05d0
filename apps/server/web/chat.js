/* The chat page (/): conversations kept in localStorage, answers streamed
 * from POST /v1/chat/completions (fetch, the response body read as a
 * ReadableStream and parsed as server-sent events), a stop button
 * (AbortController), and answers rendered by markdown.js as DOM nodes. */
"use strict";

(() => {
  const STORE = "tokamak.chat.v1";        /* {conversations: [{id, title, messages}], current} */
  const SETTINGS = "tokamak.settings.v1"; /* {temperature, max_tokens, api_key} */
  const $ = (id) => document.getElementById(id);
  const ui = {
    messages: $("messages"), composer: $("composer"), input: $("input"), send: $("send"), stop: $("stop"),
    list: $("conversations"), newChat: $("new-chat"), temperature: $("temperature"), maxTokens: $("max-tokens"),
    apiKey: $("api-key"), model: $("model-status"),
  };

  function read(key) {
    try {
      return JSON.parse(localStorage.getItem(key)) || {};
    } catch {
      return {};
    }
  }

  const state = read(STORE);
  if (!Array.isArray(state.conversations)) state.conversations = [];
  let saveError = null;
  let saveTimer = null;
  let streaming = null; /* the AbortController of the answer in progress */

  function save() {
    clearTimeout(saveTimer);
    saveTimer = null;
    try {
      localStorage.setItem(STORE, JSON.stringify(state));
      saveError = null;
    } catch (e) {
      saveError = "Conversations are not saved in this browser: " + e.message;
    }
    showModelStatus();
  }

  /* While an answer streams: save at most every 300 ms. */
  function saveSoon() {
    if (!saveTimer) saveTimer = setTimeout(save, 300);
  }

  function current() {
    let c = state.conversations.find((c) => c.id === state.current);
    if (!c) {
      c = { id: Date.now().toString(36) + Math.random().toString(36).slice(2, 8), title: "New chat", messages: [] };
      state.conversations.unshift(c);
      state.current = c.id;
    }
    return c;
  }

  /* ---- settings ---- */

  function loadSettings() {
    const s = read(SETTINGS);
    if (Number.isFinite(s.temperature)) ui.temperature.value = s.temperature;
    if (Number.isInteger(s.max_tokens)) ui.maxTokens.value = s.max_tokens;
    if (typeof s.api_key === "string") ui.apiKey.value = s.api_key;
  }

  function settings() {
    const t = parseFloat(ui.temperature.value);
    const n = parseInt(ui.maxTokens.value, 10);
    return {
      temperature: Number.isFinite(t) && t >= 0 ? t : 0.7,
      max_tokens: Number.isInteger(n) && n > 0 ? n : 512,
      api_key: ui.apiKey.value.trim(),
    };
  }

  function saveSettings() {
    try {
      localStorage.setItem(SETTINGS, JSON.stringify(settings()));
    } catch (e) {
      saveError = "Settings are not saved in this browser: " + e.message;
    }
  }

  function headers() {
    const h = { "Content-Type": "application/json" };
    const key = settings().api_key;
    if (key) h.Authorization = "Bearer " + key;
    return h;
  }

  /* The served model's name, or what keeps the page from using it. */
  let modelText = "";
  async function checkModel() {
    try {
      const r = await fetch("/v1/models", { headers: headers(), cache: "no-store" });
      if (r.status === 401) modelText = "The server wants an API key: enter it above.";
      else if (!r.ok) modelText = "/v1/models answered " + r.status;
      else modelText = "model: " + ((await r.json()).data[0] || {}).id;
    } catch {
      modelText = "The server cannot be reached.";
    }
    showModelStatus();
  }

  function showModelStatus() {
    ui.model.textContent = saveError ? modelText + " " + saveError : modelText;
  }

  /* ---- rendering ---- */

  function renderList() {
    ui.list.replaceChildren();
    for (const c of state.conversations) {
      const li = document.createElement("li");
      if (c.id === state.current) li.className = "current";
      const open = document.createElement("button");
      open.type = "button";
      open.className = "open";
      open.textContent = c.title;
      open.title = c.title;
      open.disabled = !!streaming;
      open.addEventListener("click", () => {
        state.current = c.id;
        save();
        render();
      });
      const del = document.createElement("button");
      del.type = "button";
      del.className = "delete";
      del.textContent = "×";
      del.title = "Delete this conversation";
      del.disabled = !!streaming;
      del.addEventListener("click", () => {
        state.conversations = state.conversations.filter((x) => x !== c);
        if (state.current === c.id) state.current = state.conversations.length ? state.conversations[0].id : null;
        save();
        render();
      });
      li.append(open, del);
      ui.list.append(li);
    }
  }

  const ROLE_NAMES = { user: "You", assistant: "Assistant", error: "Error" };

  function messageView(m) {
    const div = document.createElement("div");
    div.className = "msg " + m.role;
    const who = document.createElement("div");
    who.className = "who";
    who.textContent = ROLE_NAMES[m.role] || m.role;
    const body = document.createElement("div");
    body.className = "body";
    const foot = document.createElement("div");
    foot.className = "foot";
    div.append(who, body, foot);
    fillMessage(div, m);
    return div;
  }

  function fillMessage(div, m) {
    const body = div.children[1];
    if (m.role === "assistant") body.replaceChildren(tkMarkdown.render(m.content));
    else body.textContent = m.content;
    div.children[2].textContent = [m.note, m.meta].filter(Boolean).join(" · ");
  }

  function nearBottom() {
    const el = document.scrollingElement;
    return el.scrollHeight - el.scrollTop - el.clientHeight < 80;
  }

  function scrollDown() {
    const el = document.scrollingElement;
    el.scrollTop = el.scrollHeight;
  }

  function render() {
    renderList();
    const c = current();
    ui.messages.replaceChildren(...c.messages.map(messageView));
    if (!c.messages.length) {
      const hint = document.createElement("p");
      hint.className = "muted hint";
      hint.textContent = "Ask something. Answers stream in as they are generated; Stop (or Escape) ends one.";
      ui.messages.append(hint);
    }
    scrollDown();
  }

  function setStreaming(controller) {
    streaming = controller;
    ui.send.disabled = !!controller;
    ui.stop.hidden = !controller;
    ui.newChat.disabled = !!controller;
    renderList();
  }

  /* ---- the request ---- */

  /* Reads server-sent events from a response body; calls onData with each
   * event's parsed JSON.  True when the stream ended with [DONE]. */
  async function readEvents(body, onData) {
    const reader = body.getReader();
    const decoder = new TextDecoder();
    let buf = "";
    for (;;) {
      let chunk;
      try {
        chunk = await reader.read();
      } catch (e) {
        if (e.name === "AbortError") throw e;
        throw new Error("The connection to the server broke off in the middle of the answer (" + e.message + ").");
      }
      if (chunk.done) return false;
      buf += decoder.decode(chunk.value, { stream: true }).replace(/\r\n/g, "\n");
      for (let end; (end = buf.indexOf("\n\n")) >= 0;) {
        const event = buf.slice(0, end);
        buf = buf.slice(end + 2);
        /* data: lines (comments such as ": ping" are skipped) */
        const data = event.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart());
        if (!data.length) continue;
        const text = data.join("\n");
        if (text === "[DONE]") {
          reader.cancel().catch(() => {});
          return true;
        }
        let obj;
        try {
          obj = JSON.parse(text);
        } catch {
          throw new Error("The server sent an event that is not JSON: " + text.slice(0, 200));
        }
        onData(obj);
      }
    }
  }

  async function errorMessage(resp) {
    let msg = resp.statusText;
    try {
      const j = await resp.json();
      msg = (j.error && j.error.message) || JSON.stringify(j);
    } catch { /* not JSON: keep the status text */ }
    if (resp.status === 401) return "The server wants an API key (" + msg + "): enter it under Settings.";
    if (/^chat template:/.test(msg))
      return "The model's chat template refused this conversation (" + resp.status + "): " + msg;
    return "The server answered " + resp.status + ": " + msg;
  }

  async function ask(conv, reply, view) {
    const s = settings();
    const messages = conv.messages
      .filter((m) => (m.role === "user" || m.role === "assistant") && m.content)
      .map((m) => ({ role: m.role, content: m.content }));
    const controller = new AbortController();
    setStreaming(controller);
    const t0 = performance.now();
    let first = null;
    let usage = null;
    let finish = null;
    try {
      let resp;
      try {
        resp = await fetch("/v1/chat/completions", {
          method: "POST", headers: headers(), signal: controller.signal, cache: "no-store",
          body: JSON.stringify({
            messages, stream: true, stream_options: { include_usage: true },
            temperature: s.temperature, max_tokens: s.max_tokens,
          }),
        });
      } catch (e) {
        if (e.name === "AbortError") throw e;
        throw new Error("The server cannot be reached (" + e.message + ").");
      }
      if (!resp.ok) throw new Error(await errorMessage(resp));
      const done = await readEvents(resp.body, (chunk) => {
        if (chunk.error) throw new Error("The server failed during the answer: " + chunk.error.message);
        if (chunk.usage) usage = chunk.usage;
        const choice = chunk.choices && chunk.choices[0];
        if (!choice) return;
        const delta = choice.delta && choice.delta.content;
        if (delta) {
          if (first === null) first = performance.now();
          reply.content += delta;
          const stick = nearBottom();
          fillMessage(view, reply);
          if (stick) scrollDown();
          saveSoon();
        }
        if (choice.finish_reason) finish = choice.finish_reason;
      });
      if (!done) throw new Error("The server closed the connection before the answer was complete.");
      if (finish === "length") reply.note = "cut at the token limit";
      if (usage && first !== null) {
        const secs = (performance.now() - t0) / 1000;
        reply.meta = usage.completion_tokens + " tokens, " + (usage.completion_tokens / secs).toFixed(1) +
          " tok/s, first token after " + Math.round(first - t0) + " ms";
      }
    } catch (e) {
      if (e.name === "AbortError") reply.note = reply.content ? "stopped" : "stopped before the first token";
      else conv.messages.push({ role: "error", content: e.message });
    } finally {
      if (!reply.content && !reply.note) conv.messages.splice(conv.messages.indexOf(reply), 1);
      setStreaming(null);
      save();
      render();
    }
  }

  function send() {
    const text = ui.input.value;
    if (!text.trim() || streaming) return;
    const conv = current();
    if (!conv.messages.some((m) => m.role === "user")) conv.title = text.trim().replace(/\s+/g, " ").slice(0, 48);
    conv.messages.push({ role: "user", content: text });
    const reply = { role: "assistant", content: "" };
    conv.messages.push(reply);
    ui.input.value = "";
    save();
    render();
    ask(conv, reply, ui.messages.lastElementChild);
  }

  ui.composer.addEventListener("submit", (e) => {
    e.preventDefault();
    send();
  });
  ui.input.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      send();
    }
  });
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && streaming) streaming.abort();
  });
  ui.stop.addEventListener("click", () => streaming && streaming.abort());
  ui.newChat.addEventListener("click", () => {
    if (current().messages.length) state.current = null;
    current();
    save();
    render();
    ui.input.focus();
  });
  for (const input of [ui.temperature, ui.maxTokens]) input.addEventListener("change", saveSettings);
  ui.apiKey.addEventListener("change", () => {
    saveSettings();
    checkModel();
  });

  loadSettings();
  render();
  checkModel();
  ui.input.focus();
})();
