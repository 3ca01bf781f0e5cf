/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* error.c - error codes, their translated names, and the thread-local detail message, formatted safely. */
#include "internal.h"
#include "utf8.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/*
 * Every message of the library is formatted here: the detail message
 * (err_set), the texts its modules build to quote in one (err_format) and
 * the log (msg_vformat).  Their string arguments (%s, %c) are names and
 * values from input, so each one is
 *
 *  1. shown (utf8_show): control characters and bytes that are not UTF-8
 *     become \xNN, so that no file or environment variable reaches the
 *     terminal that prints the message, nor breaks it into lines.  Text
 *     shown once is shown the same again: a message may quote another.
 *  2. bounded: an argument longer than ARG_MAX bytes keeps its head and
 *     its tail around a mark "…(N bytes left out)…" (a path ends in its
 *     file's name, a quoted message in its reason).  A message that this
 *     thread formatted lately, quoted whole ("%s: %s", path, why), is
 *     bounded already and kept (recent[], by its hash): modules copy
 *     devcache_last_error() aside before they quote it.
 *  3. fitted: if the whole is still too long for its buffer, the longest
 *     arguments are cut to one length until it fits, so that the words of
 *     the format itself (the reason) are never the part that is lost.
 *
 * Formats are the library's own (and their translations, which may number
 * their arguments, %2$s); numbers are printed by snprintf.  A format this
 * parser does not know (which the tree does not use) is printed by
 * vsnprintf and shown as a whole.
 */

#define ARG_MAX 200   /* shown bytes of one argument before it is cut */
#define MIN_CUT 64    /* the shortest an argument is cut to when fitting */
#define MAX_ARGS 16
#define MAX_PIECES 48
#define RECENT 8

/* Like errno: one per thread, so concurrent calls never see each other's. */
static __thread char detail[1024];
/* The hashes of the messages this thread formatted last (a ring). */
static __thread uint64_t recent[RECENT];
static __thread unsigned recent_next;

enum arg_type { A_NONE, A_INT, A_LONG, A_LLONG, A_INTMAX, A_SIZE, A_PTRDIFF, A_DOUBLE,
		A_LDOUBLE, A_PTR, A_STR };

union arg_value {
	int i;
	long l;
	long long ll;
	intmax_t im;
	size_t z;
	ptrdiff_t t;
	double d;
	long double ld;
	const void *p;
	const char *s;
};

/* A run of the format's own text, or one conversion. */
struct piece {
	const char *text; /* the literal, or the conversion from its '%' */
	size_t len;
	char conv;        /* 0: a literal */
	char flags[8];
	int arg, width_arg, prec_arg; /* argument indexes; -1: none */
	int width, prec;              /* as written; -1: none */
	enum arg_type type;
	const char *lm;   /* the length modifier as written */
	size_t lm_len;
	/* strings, once measured */
	const char *s;
	char c[2];
	size_t n, shown, limit; /* input bytes, their shown length, the most kept */
};

struct format {
	struct piece p[MAX_PIECES];
	size_t n_pieces;
	enum arg_type types[MAX_ARGS];
	union arg_value v[MAX_ARGS];
	int n_args;
};

static uint64_t hash(const char *s, size_t n)
{
	uint64_t h = 0xcbf29ce484222325u; /* FNV-1a */

	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 0x100000001b3u;
	return h;
}

static void remember(const char *msg)
{
	recent[recent_next++ % RECENT] = hash(msg, strlen(msg));
}

/* A message this thread formatted lately: shown and bounded already. */
static bool is_recent(const char *s, size_t n, size_t shown)
{
	uint64_t h;

	if (shown != n || n >= sizeof detail)
		return false;
	h = hash(s, n);
	for (unsigned i = 0; i < RECENT; i++)
		if (recent[i] == h && h)
			return true;
	return false;
}

static int number(const char **f)
{
	int v = 0;

	while (**f >= '0' && **f <= '9') {
		if (v < 100000)
			v = v * 10 + (**f - '0');
		(*f)++;
	}
	return v;
}

static enum arg_type type_of(char conv, const char *lm, size_t lm_len)
{
	bool l = lm_len == 1 && lm[0] == 'l', ll = lm_len == 2 && lm[0] == 'l';

	switch (conv) {
	case 'd': case 'i': case 'u': case 'x': case 'X': case 'o':
		if (!lm_len || lm[0] == 'h')
			return A_INT;
		return l ? A_LONG : ll ? A_LLONG : lm[0] == 'j' ? A_INTMAX
			 : lm[0] == 'z' ? A_SIZE : lm[0] == 't' ? A_PTRDIFF : A_NONE;
	case 'f': case 'F': case 'e': case 'E': case 'g': case 'G': case 'a': case 'A':
		return !lm_len ? A_DOUBLE : lm[0] == 'L' ? A_LDOUBLE : A_NONE;
	case 'c':
		return lm_len ? A_NONE : A_INT;
	case 's':
		return lm_len ? A_NONE : A_STR;
	case 'p':
		return lm_len ? A_NONE : A_PTR;
	default:
		return A_NONE;
	}
}

/* "N$" at *f: N - 1, past it; -1 (not moved) where there is none. */
static int numbered(const char **f)
{
	const char *q = *f;
	int k = number(&q);

	if (q == *f || *q != '$' || k < 1)
		return -1;
	*f = q + 1;
	return k - 1;
}

static bool want(struct format *fm, int k, enum arg_type t)
{
	if (k < 0 || k >= MAX_ARGS || t == A_NONE ||
	    (fm->types[k] != A_NONE && fm->types[k] != t))
		return false;
	fm->types[k] = t;
	if (k >= fm->n_args)
		fm->n_args = k + 1;
	return true;
}

static bool add_literal(struct format *fm, const char *text, size_t len)
{
	if (!len)
		return true;
	if (fm->n_pieces == MAX_PIECES)
		return false;
	fm->p[fm->n_pieces++] = (struct piece){.text = text, .len = len};
	return true;
}

/* One conversion at *f (past its '%'), with its arguments numbered as
 * written or taken in turn (width, precision, value) from *next. */
static bool parse_conv(struct format *fm, const char **f, int *next)
{
	struct piece *p = &fm->p[fm->n_pieces];
	const char *start = *f - 1;
	size_t nf = 0;

	*p = (struct piece){.arg = -1, .width_arg = -1, .prec_arg = -1, .width = -1, .prec = -1};
	p->arg = numbered(f);
	while (**f && strchr("-+ #0'", **f) && nf < sizeof p->flags - 1)
		p->flags[nf++] = *(*f)++;
	if (**f == '*') {
		(*f)++;
		if ((p->width_arg = numbered(f)) < 0)
			p->width_arg = (*next)++;
	} else if (**f >= '0' && **f <= '9') {
		p->width = number(f);
	}
	if (**f == '.') {
		(*f)++;
		if (**f == '*') {
			(*f)++;
			if ((p->prec_arg = numbered(f)) < 0)
				p->prec_arg = (*next)++;
		} else {
			p->prec = number(f);
		}
	}
	if (p->arg < 0)
		p->arg = (*next)++;
	p->lm = *f;
	while (**f && strchr("hljztL", **f))
		(*f)++;
	p->lm_len = (size_t)(*f - p->lm);
	p->conv = **f;
	if (!p->conv)
		return false;
	(*f)++;
	p->text = start;
	p->len = (size_t)(*f - start);
	p->type = type_of(p->conv, p->lm, p->lm_len);
	if (!want(fm, p->arg, p->type) ||
	    (p->width_arg >= 0 && !want(fm, p->width_arg, A_INT)) ||
	    (p->prec_arg >= 0 && !want(fm, p->prec_arg, A_INT)))
		return false;
	fm->n_pieces++;
	return true;
}

static bool parse(struct format *fm, const char *fmt)
{
	const char *f = fmt, *lit = fmt;
	int next = 0;

	while ((f = strchr(f, '%'))) {
		if (f[1] == '%') {
			if (!add_literal(fm, lit, (size_t)(f + 1 - lit)))
				return false;
			lit = f += 2;
			continue;
		}
		if (!add_literal(fm, lit, (size_t)(f - lit)) || fm->n_pieces == MAX_PIECES)
			return false;
		f++;
		if (!parse_conv(fm, &f, &next))
			return false;
		lit = f;
	}
	if (!add_literal(fm, lit, strlen(lit)))
		return false;
	/* Every argument up to the last one used has a type. */
	for (int k = 0; k < fm->n_args; k++)
		if (fm->types[k] == A_NONE)
			return false;
	return true;
}

static void fetch(struct format *fm, va_list ap)
{
	for (int k = 0; k < fm->n_args; k++) {
		union arg_value *v = &fm->v[k];

		switch (fm->types[k]) {
		case A_INT: v->i = va_arg(ap, int); break;
		case A_LONG: v->l = va_arg(ap, long); break;
		case A_LLONG: v->ll = va_arg(ap, long long); break;
		case A_INTMAX: v->im = va_arg(ap, intmax_t); break;
		case A_SIZE: v->z = va_arg(ap, size_t); break;
		case A_PTRDIFF: v->t = va_arg(ap, ptrdiff_t); break;
		case A_DOUBLE: v->d = va_arg(ap, double); break;
		case A_LDOUBLE: v->ld = va_arg(ap, long double); break;
		case A_PTR: v->p = va_arg(ap, const void *); break;
		case A_STR: v->s = va_arg(ap, const char *); break;
		case A_NONE: break;
		}
	}
}

/* The width, 0 where there is none; negative: left-aligned. */
static int width_of(const struct format *fm, const struct piece *p)
{
	return p->width_arg >= 0 ? fm->v[p->width_arg].i : p->width > 0 ? p->width : 0;
}

static int prec_of(const struct format *fm, const struct piece *p)
{
	return p->prec_arg >= 0 ? fm->v[p->prec_arg].i : p->prec;
}

/*
 * A number (or a pointer) as snprintf prints it: the conversion is written
 * again with its width and precision as digits and without its argument
 * number.  The format is built here from one the compiler checked.
 */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
static size_t print_number(const struct format *fm, const struct piece *p, char *buf, size_t size)
{
	const union arg_value *v = &fm->v[p->arg];
	char spec[64];
	int w = width_of(fm, p), pr = prec_of(fm, p), n = 0;
	size_t k = 0;

	spec[k++] = '%';
	for (const char *c = p->flags; *c; c++)
		spec[k++] = *c;
	if (w < 0 && p->width_arg >= 0) /* a negative width: left-aligned */
		spec[k++] = '-', w = -w;
	if (w > 0)
		k += (size_t)snprintf(spec + k, sizeof spec - k, "%d", w);
	if (pr >= 0)
		k += (size_t)snprintf(spec + k, sizeof spec - k, ".%d", pr);
	memcpy(spec + k, p->lm, p->lm_len);
	k += p->lm_len;
	spec[k++] = p->conv;
	spec[k] = '\0';
	switch (p->type) {
	case A_INT: n = snprintf(buf, size, spec, v->i); break;
	case A_LONG: n = snprintf(buf, size, spec, v->l); break;
	case A_LLONG: n = snprintf(buf, size, spec, v->ll); break;
	case A_INTMAX: n = snprintf(buf, size, spec, v->im); break;
	case A_SIZE: n = snprintf(buf, size, spec, v->z); break;
	case A_PTRDIFF: n = snprintf(buf, size, spec, v->t); break;
	case A_DOUBLE: n = snprintf(buf, size, spec, v->d); break;
	case A_LDOUBLE: n = snprintf(buf, size, spec, v->ld); break;
	case A_PTR: n = snprintf(buf, size, spec, v->p); break;
	case A_STR: case A_NONE: break;
	}
	return n > 0 ? (size_t)n : 0;
}
#pragma GCC diagnostic pop

/* An output buffer that keeps what fits and counts the rest. */
struct out {
	char *buf;
	size_t size, len;
};

static void put(struct out *o, const char *s, size_t n)
{
	if (o->len < o->size) {
		size_t room = o->size - o->len;

		memcpy(o->buf + o->len, s, n < room ? n : room);
	}
	o->len += n;
}

/* s[from..to) shown; up to the byte where it would pass limit shown bytes
 * (the whole of it for SIZE_MAX); returns where it stopped. */
static size_t put_shown(struct out *o, const char *s, size_t from, size_t to, size_t limit)
{
	char unit[UTF8_SHOWN_MAX];
	size_t i = from, shown = 0, len, used;

	while (i < to) {
		used = utf8_show(s + i, to - i, unit, &len);
		if (limit != SIZE_MAX && shown + len > limit)
			break;
		if (o)
			put(o, unit, len);
		shown += len;
		i += used;
	}
	return i;
}

static size_t digits(size_t n)
{
	size_t d = 1;

	while (n >= 10)
		n /= 10, d++;
	return d;
}

/* "…(N bytes left out)…" for n bytes; its length, and on o unless NULL. */
static size_t put_mark(struct out *o, size_t n)
{
	char words[96];
	int len = snprintf(words, sizeof words, P_("%zu byte left out", "%zu bytes left out", n), n);
	size_t k = len > 0 ? (size_t)len : 0;

	if (k >= sizeof words)
		k = sizeof words - 1;
	if (o) {
		put(o, "\xe2\x80\xa6(", 4);
		put(o, words, k);
		put(o, ")\xe2\x80\xa6", 4);
	}
	return 8 + k;
}

/* The longest put_mark() can be for at most n bytes left out. */
static size_t mark_max(size_t n)
{
	size_t one = put_mark(NULL, 1) + digits(n), many = put_mark(NULL, n);

	return one > many ? one : many;
}

/* s[0..n) shown, cut in its middle to at most limit bytes; its length, and
 * on o unless NULL. */
static size_t put_cut(struct out *o, const char *s, size_t n, size_t limit)
{
	size_t mark = mark_max(n), content = limit > mark ? limit - mark : 0;
	size_t head = content * 2 / 3, tail = content - head;
	size_t head_end = put_shown(NULL, s, 0, n, head), from = head_end;
	size_t rest = utf8_shown_len(s + from, n - from), used, len;
	char unit[UTF8_SHOWN_MAX];

	while (rest > tail) {
		used = utf8_show(s + from, n - from, unit, &len);
		from += used;
		rest -= len;
	}
	if (o) {
		put_shown(o, s, 0, head_end, SIZE_MAX);
		put_mark(o, from - head_end);
		put_shown(o, s, from, n, SIZE_MAX);
	}
	return utf8_shown_len(s, head_end) + put_mark(NULL, from - head_end) + rest;
}

/* A string argument (%s, %c): what it shows, and the most it may keep. */
static void measure(struct format *fm, struct piece *p, size_t arg_max)
{
	int prec = prec_of(fm, p);

	if (p->conv == 'c') {
		p->c[0] = (char)fm->v[p->arg].i;
		p->s = p->c;
		p->n = 1;
	} else {
		p->s = fm->v[p->arg].s ? fm->v[p->arg].s : "(null)";
		p->n = prec >= 0 ? strnlen(p->s, (size_t)prec) : strlen(p->s);
	}
	p->shown = utf8_shown_len(p->s, p->n);
	p->limit = p->shown;
	if (p->shown > arg_max && !is_recent(p->s, p->n, p->shown))
		p->limit = arg_max;
}

static bool is_string(const struct piece *p)
{
	return p->conv == 's' || p->conv == 'c';
}

/* Cut the string arguments to one length so that the whole fits avail. */
static void fit(struct format *fm, size_t fixed, size_t avail)
{
	size_t lo = MIN_CUT, hi = 0, sum;

	for (size_t i = 0; i < fm->n_pieces; i++)
		if (is_string(&fm->p[i]) && fm->p[i].limit > hi)
			hi = fm->p[i].limit;
	/* The longest cut that fits: sum(min(limit, cut)) grows with cut. */
	while (lo < hi) {
		size_t mid = lo + (hi - lo + 1) / 2;

		sum = fixed;
		for (size_t i = 0; i < fm->n_pieces; i++)
			if (is_string(&fm->p[i]))
				sum += fm->p[i].limit < mid ? fm->p[i].limit : mid;
		if (sum <= avail)
			lo = mid;
		else
			hi = mid - 1;
	}
	for (size_t i = 0; i < fm->n_pieces; i++)
		if (is_string(&fm->p[i]) && fm->p[i].limit > lo)
			fm->p[i].limit = lo;
}

static void put_string(struct out *o, const struct format *fm, const struct piece *p)
{
	int w = width_of(fm, p);
	bool left = strchr(p->flags, '-') || w < 0;
	size_t len = p->limit < p->shown ? put_cut(NULL, p->s, p->n, p->limit) : p->shown;
	size_t pad = w < 0 ? (size_t)-(long)w : (size_t)w;

	pad = pad > len ? pad - len : 0;
	for (size_t i = 0; !left && i < pad; i++)
		put(o, " ", 1);
	if (p->limit < p->shown)
		put_cut(o, p->s, p->n, p->limit);
	else
		put_shown(o, p->s, 0, p->n, SIZE_MAX);
	for (size_t i = 0; left && i < pad; i++)
		put(o, " ", 1);
}

/* A format this parser does not know: printed by vsnprintf, shown whole. */
static size_t DEVCACHE_PRINTF(3, 0) format_plain(char *buf, size_t size, const char *fmt, va_list ap)
{
	char raw[2048];
	struct out o = {buf, size - 1, 0};

	vsnprintf(raw, sizeof raw, fmt, ap);
	put_shown(&o, raw, 0, strlen(raw), size - 1);
	buf[o.len] = '\0';
	return o.len;
}

/* Where the text in buf[0..len) may end: not inside a UTF-8 sequence. */
static size_t char_end(const char *buf, size_t len)
{
	size_t end = len;

	while (end > 0 && len - end < 4 && ((unsigned char)buf[end] & 0xc0) == 0x80)
		end--;
	return ((unsigned char)buf[end] & 0xc0) == 0x80 ? len : end;
}

/* fmt with ap, as the note at the top says, into buf[size] (size > 0);
 * arg_max bounds each argument (SIZE_MAX: only the whole is bounded). */
static size_t DEVCACHE_PRINTF(4, 0) format(char *buf, size_t size, size_t arg_max,
					   const char *fmt, va_list ap)
{
	struct format fm = {.n_pieces = 0};
	size_t fixed = 0;
	struct out o = {buf, size, 0};

	if (!parse(&fm, fmt))
		return format_plain(buf, size, fmt, ap);
	fetch(&fm, ap);
	for (size_t i = 0; i < fm.n_pieces; i++) {
		struct piece *p = &fm.p[i];

		if (!p->conv) {
			fixed += p->len;
		} else if (is_string(p)) {
			int w = width_of(&fm, p);

			measure(&fm, p, arg_max);
			fixed += w < 0 ? (size_t)-(long)w : (size_t)w; /* at most the padding */
		} else {
			fixed += print_number(&fm, p, NULL, 0);
		}
	}
	fit(&fm, fixed, size - 1);
	for (size_t i = 0; i < fm.n_pieces; i++) {
		struct piece *p = &fm.p[i];

		if (!p->conv) {
			put(&o, p->text, p->len);
		} else if (is_string(p)) {
			put_string(&o, &fm, p);
		} else {
			char num[512];
			size_t n = print_number(&fm, p, num, sizeof num);

			put(&o, num, n < sizeof num ? n : sizeof num - 1);
		}
	}
	/* Only where the format's own words and numbers pass size. */
	if (o.len >= size)
		o.len = char_end(buf, size - 1);
	buf[o.len] = '\0';
	return o.len;
}

size_t err_vformat(char *buf, size_t size, const char *fmt, va_list ap)
{
	size_t len = format(buf, size, ARG_MAX, fmt, ap);

	remember(buf);
	return len;
}

size_t err_format(char *buf, size_t size, const char *fmt, ...)
{
	va_list ap;
	size_t len;

	va_start(ap, fmt);
	len = err_vformat(buf, size, fmt, ap);
	va_end(ap);
	return len;
}

size_t msg_vformat(char *buf, size_t size, const char *fmt, va_list ap)
{
	return format(buf, size, SIZE_MAX, fmt, ap);
}

size_t msg_format(char *buf, size_t size, const char *fmt, ...)
{
	va_list ap;
	size_t len;

	va_start(ap, fmt);
	len = msg_vformat(buf, size, fmt, ap);
	va_end(ap);
	return len;
}

/* The message may quote the one it replaces (devcache_last_error() as an
 * argument): it is written aside first, as the formatter must not read
 * what it writes. */
int err_setv(int code, const char *fmt, va_list ap)
{
	char text[sizeof detail];

	err_vformat(text, sizeof text, fmt, ap);
	memcpy(detail, text, sizeof detail);
	return code;
}

int err_oom(void)
{
	return err_set(DEVCACHE_ENOMEM, _("out of memory"));
}

int err_set(int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	err_setv(code, fmt, ap);
	va_end(ap);
	return code;
}

void err_clear(void)
{
	detail[0] = '\0';
}

const char *devcache_last_error(void)
{
	return detail;
}

static const char *const messages[] = {
	[0] = N_("Success"),
	[-DEVCACHE_EINVAL] = N_("Invalid argument"),
	[-DEVCACHE_ENOMEM] = N_("Out of memory"),
	[-DEVCACHE_ECONFIG] = N_("Configuration error"),
	[-DEVCACHE_ENODEV] = N_("No such device"),
	[-DEVCACHE_EBACKEND] = N_("Backend or driver failure"),
	[-DEVCACHE_EABI] = N_("Backend module ABI mismatch"),
	[-DEVCACHE_EIO] = N_("Input/output error"),
	[-DEVCACHE_EFORMAT] = N_("Malformed file"),
	[-DEVCACHE_ENOTSUP] = N_("Not supported"),
	[-DEVCACHE_EBUSY] = N_("Resource busy"),
	[-DEVCACHE_ECANCELED] = N_("Operation canceled"),
	[-DEVCACHE_ENOENT] = N_("No such entry"),
	[-DEVCACHE_EAGAIN] = N_("Not ready yet"),
	[-DEVCACHE_ETYPE] = N_("Value of another type"),
};

const char *devcache_strerror(int err)
{
	if (err > 0 || err < DEVCACHE_ERROR_MIN)
		return _("Unknown error");
	return _(messages[-err]);
}
