/* Progress lines on stderr (progress.h). */
#include "progress.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <tokamak.h>

#define BAR_WIDTH 24
#define TTY_REDRAW_S 0.1  /* terminal: at most 10 redraws a second */
#define PLAIN_EVERY_S 5.0 /* plain lines: at each 10 % step, and at least this often */

void tk_progress_begin(tk_progress *p, const char *label, const char *unit, double delay, bool quiet) {
    memset(p, 0, sizeof *p);
    snprintf(p->label, sizeof p->label, "%s", label);
    p->unit = unit;
    p->tty = isatty(STDERR_FILENO) != 0;
    p->quiet = quiet;
    p->delay = delay;
    p->t0 = p->last_line = tk_clock_seconds(TK_CLOCK_WALL);
    p->last_draw = -1;
}

/* "12s", "3m05s", "1h02m"; "?" before there is a rate. */
static void fmt_duration(char *buf, size_t cap, double s) {
    if (!(s >= 0) || s > 1e7) {
        snprintf(buf, cap, "?");
    } else if (s < 60) {
        snprintf(buf, cap, "%.0fs", s);
    } else if (s < 3600) {
        snprintf(buf, cap, "%dm%02ds", (int)s / 60, (int)s % 60);
    } else {
        snprintf(buf, cap, "%dh%02dm", (int)s / 3600, (int)s % 3600 / 60);
    }
}

void tk_progress_update(tk_progress *p, double done, double total, const char *note) {
    if (p->quiet) return;
    const double now = tk_clock_seconds(TK_CLOCK_WALL), el = now - p->t0;
    if (el < p->delay) return;
    if (total <= 0) total = 1;
    if (done > total) done = total;
    const double frac = done / total, rate = el > 0 ? done / el : 0;
    char eta[16];
    fmt_duration(eta, sizeof eta, rate > 0 ? (total - done) / rate : -1);
    if (p->tty) {
        if (p->last_draw >= 0 && now - p->last_draw < TTY_REDRAW_S && done < total) return;
        p->last_draw = now;
        char bar[BAR_WIDTH + 1];
        const int fill = (int)(frac * BAR_WIDTH);
        for (int i = 0; i < BAR_WIDTH; i++) bar[i] = i < fill ? '#' : '.';
        bar[BAR_WIDTH] = 0;
        fprintf(stderr, "\r%-10s [%s] %3.0f%% %.0f/%.0f %s, %.3g %s/s, ETA %s%s%.28s\033[K", p->label, bar,
                100 * frac, done, total, p->unit, rate, p->unit, eta, note ? "  " : "", note ? note : "");
        p->open_line = true;
    } else {
        const int step = (int)(frac * 10);
        if (step <= p->last_step && now - p->last_line < PLAIN_EVERY_S) return;
        p->last_step = step;
        p->last_line = now;
        fprintf(stderr, "%s: %3.0f%% (%.0f/%.0f %s), %.1fs elapsed, %.3g %s/s, ETA %s%s%s\n", p->label, 100 * frac,
                done, total, p->unit, el, rate, p->unit, eta, note ? ": " : "", note ? note : "");
    }
    p->shown = true;
    fflush(stderr);
}

void tk_progress_end(tk_progress *p, double done) {
    if (p->quiet || !p->shown) return;
    const double el = tk_clock_seconds(TK_CLOCK_WALL) - p->t0;
    if (p->open_line) fputc('\n', stderr);
    fprintf(stderr, "%s: %.0f %s in %.1fs (%.3g %s/s)\n", p->label, done, p->unit, el, el > 0 ? done / el : 0,
            p->unit);
    p->open_line = false;
    fflush(stderr);
}

void tk_progress_abandon(tk_progress *p) {
    if (p->open_line) fputc('\n', stderr);
    p->open_line = false;
}
