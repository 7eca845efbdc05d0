/* Progress of long work on stderr: on a terminal, one line redrawn in place
 * (a bar, percent, count, rate, ETA); otherwise plain lines at each 10 %
 * step or every 5 s, so logs stay readable.  Work that ends before `delay`
 * seconds shows nothing (model load). */
#ifndef TK_PROGRESS_H
#define TK_PROGRESS_H

#include <stdbool.h>

typedef struct tk_progress {
    char label[24];   /* "quantize", "convert", ... */
    const char *unit; /* "tensors", "windows", ... */
    bool tty, quiet;
    double delay;     /* seconds before anything is shown */
    double t0, last_draw, last_line;
    int last_step;    /* plain lines: the last 10 % step printed */
    bool shown;       /* something was printed */
    bool open_line;   /* a terminal line is drawn and not ended */
} tk_progress;

/* Starts timing; nothing is printed yet.  quiet: never print. */
void tk_progress_begin(tk_progress *p, const char *label, const char *unit, double delay, bool quiet);
/* done of total units; note (may be NULL): what is being worked on. */
void tk_progress_update(tk_progress *p, double done, double total, const char *note);
/* Ends the line (if any) with the totals: "label: N units in S s (R units/s)",
 * printed only when progress was shown. */
void tk_progress_end(tk_progress *p, double done);
/* The work failed: ends a terminal line, prints no totals. */
void tk_progress_abandon(tk_progress *p);

#endif
