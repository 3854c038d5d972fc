#ifndef ROLLOUT_CNCURSES_SHIM_H
#define ROLLOUT_CNCURSES_SHIM_H
// SwiftPM drops pkg-config's -D_XOPEN_SOURCE, so ask for the wide-character API explicitly.
#define NCURSES_WIDECHAR 1
#ifndef _XOPEN_SOURCE_EXTENDED
#define _XOPEN_SOURCE_EXTENDED 1
#endif
#include <locale.h>
#include <wchar.h>
#include <ncursesw/ncurses.h>

int wcwidth(wchar_t c);

// Swift 6 rejects ncurses' mutable globals and cannot call macros; expose them as functions.
static inline WINDOW *rollout_stdscr(void) { return stdscr; }
static inline int rollout_lines(void) { return LINES; }
static inline int rollout_cols(void) { return COLS; }
static inline int rollout_colors(void) { return COLORS; }
static inline int rollout_color_pairs(void) { return COLOR_PAIRS; }
static inline attr_t rollout_a_bold(void) { return A_BOLD; }
static inline attr_t rollout_a_reverse(void) { return A_REVERSE; }
static inline attr_t rollout_a_underline(void) { return A_UNDERLINE; }
static inline attr_t rollout_a_dim(void) { return A_DIM; }
static inline attr_t rollout_a_normal(void) { return A_NORMAL; }
static inline attr_t rollout_color_pair(int n) { return COLOR_PAIR(n); }
static inline int rollout_key_resize(void) { return KEY_RESIZE; }
static inline int rollout_err(void) { return ERR; }
static inline int rollout_key_mouse(void) { return KEY_MOUSE; }
// Left-button clicks and the wheel (buttons 4 and 5); with mouseinterval(0) a press arrives at once, without
// waiting for its release.
static inline mmask_t rollout_click_mask(void) {
    return BUTTON1_PRESSED | BUTTON1_CLICKED | BUTTON1_RELEASED | BUTTON4_PRESSED | BUTTON5_PRESSED;
}
// The pending mouse event at (x, y): 1 a left click, 2 the wheel up, 3 the wheel down, 0 anything else (a
// release, another button).
static inline int rollout_mouse_event(int *x, int *y) {
    MEVENT e;
    if (getmouse(&e) != OK) return 0;
    *x = e.x; *y = e.y;
    if (e.bstate & (BUTTON1_PRESSED | BUTTON1_CLICKED)) return 1;
    if (e.bstate & BUTTON4_PRESSED) return 2;
    if (e.bstate & BUTTON5_PRESSED) return 3;
    return 0;
}
static inline void rollout_getmaxyx(WINDOW *w, int *y, int *x) { int yy, xx; getmaxyx(w, yy, xx); *y = yy; *x = xx; }
#endif
