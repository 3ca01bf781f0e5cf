/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* mkman-roff.c - mkman's roff text: names and values escaped, running text in sentences, a tunable's type, default and range in words. */
#include "config.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mkman.h"

/* ---- roff escaping ----------------------------------------------------- */

/* Writes the bytes s[0..n) as roff text.  Backslashes become \e; characters
 * that roff or the terminal would change are escaped; non-ASCII UTF-8 becomes
 * \[uXXXX], so the page does not depend on the input encoding groff assumes. */
void put_chars(FILE *f, const char *s, size_t n, unsigned flags)
{
	int code = flags & ESC_CODE;
	int breaks = (flags & ESC_BREAK) && n > 24;

	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '\\')
			fputs("\\e", f);
		else if (c == '-' && code)
			fputs("\\-", f);
		else if (c == '\'' && code)
			fputs("\\(aq", f);
		else if (c == '`')
			fputs("\\(ga", f);
		else if (c == '"' && (flags & ESC_ARG))
			fputs("\\(dq", f);
		else if ((c == '/' || c == ',') && breaks && i > 0 && i + 1 < n)
			fprintf(f, "%c\\:", c);
		else if (c >= 0x80) {
			int len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 0;
			unsigned long cp;

			if (len == 0 || i + (size_t)len > n) {
				mk_warn("invalid UTF-8 in the tunable table");
				fputs("\\[uFFFD]", f);
				continue;
			}
			cp = c & (0x7fu >> len);
			for (int k = 1; k < len; k++)
				cp = cp << 6 | ((unsigned char)s[i + (size_t)k] & 0x3f);
			fprintf(f, "\\[u%04lX]", cp);
			i += (size_t)len - 1;
		} else
			fputc(c, f);
	}
}

/* A name or value as a macro argument or a line of its own. */
void put_code(FILE *f, const char *s, unsigned flags)
{
	if (*s == '.' || *s == '\'')
		fputs("\\&", f);
	put_chars(f, s, strlen(s), flags | ESC_CODE);
}

/* A word is code (a name, option, path or value) rather than English when it
 * holds characters English words do not: "read-only" keeps its hyphen,
 * "devcache-trace(5)" gets a minus sign. */
static int word_is_code(const char *w, size_t n)
{
	if (n > 0 && w[0] == '-')
		return 1;
	for (size_t i = 0; i < n; i++)
		if (strchr("_/=()[]:%^0123456789", w[i]) || (w[i] == '.' && i + 1 < n))
			return 1;
	return 0;
}

static int name_char(int c)
{
	return isalnum(c) || c == '_' || c == '-' || c == '.';
}

/* One whitespace-separated word of running text, with its markup: NAME(N)
 * and function() in bold with the parentheses in roman; tunables and PyTorch
 * keys in bold when they hold an underscore (a bare "mmap" or "trace" is an
 * ordinary word as often as a name). */
static void put_word(FILE *f, const char *w, size_t n)
{
	unsigned flags = (word_is_code(w, n) ? ESC_CODE : 0) | ESC_BREAK;
	size_t a = 0, b = n, e;

	while (a < n && strchr("(\"'[", w[a]))
		a++;
	while (b > a && strchr(",.;:)\"'!?", w[b - 1]))
		b--;
	/* the loop above ate the ")" of "name()" and "name(5)" */
	if (b < n && w[b] == ')' && b > a && (w[b - 1] == '(' || isdigit((unsigned char)w[b - 1])))
		b++;
	for (e = a; e < b && name_char((unsigned char)w[e]);)
		e++;
	while (e > a && w[e - 1] == '.')
		e--;

	int section_ref = e > a && b - e >= 3 && w[e] == '(' && isdigit((unsigned char)w[e + 1]) &&
			  w[b - 1] == ')';
	int call = e > a && b - e == 2 && w[e] == '(' && w[e + 1] == ')';
	int name = e > a && e == b && memchr(w + a, '_', e - a) &&
		   (is_tunable(w + a, e - a) || is_compat(w + a, e - a));

	/* a name broken with a hyphen reads as another name */
	if (flags & ESC_CODE || section_ref || call || name)
		fputs("\\%", f);
	if (!section_ref && !call && !name) {
		put_chars(f, w, n, flags);
		return;
	}
	put_chars(f, w, a, flags);
	fputs("\\fB", f);
	put_chars(f, w + a, e - a, flags | ESC_CODE);
	fputs("\\fR", f);
	put_chars(f, w + e, n - e, flags | ESC_CODE);
}

static int is_abbreviation(const char *w, size_t n)
{
	return (n == 4 && (memcmp(w, "e.g.", 4) == 0 || memcmp(w, "i.e.", 4) == 0)) ||
	       (n == 3 && memcmp(w, "cf.", 3) == 0);
}

/* A paragraph of running text, ending in a newline: a new source line for
 * each sentence (the roff convention, and what makes groff space sentences),
 * no line starting with a control character. */
void put_paragraph(FILE *f, const char *s, size_t n)
{
	size_t i = 0;
	int line_start = 1;

	while (i < n && isspace((unsigned char)s[i]))
		i++;
	while (i < n) {
		size_t j = i, k;

		while (j < n && !isspace((unsigned char)s[j]))
			j++;
		if (line_start && (s[i] == '.' || s[i] == '\''))
			fputs("\\&", f);
		put_word(f, s + i, j - i);
		for (k = j; k < n && isspace((unsigned char)s[k]);)
			k++;
		if (k == n)
			break;

		char last = s[j - 1];
		if ((last == '"' || last == ')') && j - i > 1)
			last = s[j - 2];
		line_start = strchr(".?!", last) && !is_abbreviation(s + i, j - i) &&
			     isupper((unsigned char)s[k]);
		fputc(line_start ? '\n' : ' ', f);
		i = k;
	}
	fputc('\n', f);
}

/* A one-line text as a sentence: capital first letter, final full stop. */
void put_sentence(FILE *f, const char *s)
{
	size_t n = strlen(s);
	char *copy = xmalloc(n + 2);

	memcpy(copy, s, n + 1);
	if (n && islower((unsigned char)copy[0]))
		copy[0] = (char)toupper((unsigned char)copy[0]);
	if (n && !strchr(".?!", copy[n - 1]))
		strcpy(copy + n, ".");
	put_paragraph(f, copy, strlen(copy));
	free(copy);
}

/* The long description: paragraphs are separated by a blank line.  sep is
 * the request that starts each paragraph after the first. */
void put_description(FILE *f, const char *doc, const char *sep)
{
	const char *p = doc;

	for (int first = 1; *p; first = 0) {
		const char *end = strstr(p, "\n\n");
		size_t n = end ? (size_t)(end - p) : strlen(p);

		if (!first)
			fprintf(f, "%s\n", sep);
		put_paragraph(f, p, n);
		if (!end)
			break;
		for (p = end; *p == '\n';)
			p++;
	}
}

/* ---- values, types and ranges in words ----------------------------------- */

static int is_number(const char *s)
{
	int digits = 0;

	for (; *s; s++) {
		if (isdigit((unsigned char)*s))
			digits++;
		else if (*s != '.')
			return 0;
	}
	return digits > 0;
}

/* A bound of a size range in words, as roff: "20M" is "20 MiB". */
static char *bound_words(const char *v, const struct tunable_def *t)
{
	size_t n = strlen(v);
	char buf[160];

	if (t->type == TT_SIZE && n > 1 && n < 64 && strchr("KMGT", v[n - 1])) {
		char *num = xstrndup(v, n - 1);
		int ok = is_number(num);

		if (ok)
			snprintf(buf, sizeof buf, "%s\\~%ciB", num, v[n - 1]);
		free(num);
		if (ok)
			return xstrdup(buf);
	}
	if (t->type == TT_SIZE && is_number(v) && strcmp(v, "0") != 0 && n < 64) {
		snprintf(buf, sizeof buf, "%s\\~%s", v, (t->flags & T_MIB) ? "MiB" : "bytes");
		return xstrdup(buf);
	}
	if (is_number(v))
		return xstrdup(v);
	if (v[0] == '-' && is_number(v + 1) && n < 64) {
		snprintf(buf, sizeof buf, "\\-%s", v + 1);
		return xstrdup(buf);
	}
	mk_warn("%s: bad bound '%s' in range '%s'", t->name, v, t->range);
	return xstrdup("?");
}

void put_type(FILE *f, const struct tunable_def *t)
{
	fprintf(f, "\\fI%s\\fR", tunable_type_name(t->type));
	if (t->type == TT_SIZE)
		fputs((t->flags & T_MIB) ? ", a bare number in MiB" : ", a bare number in bytes", f);
	if (t->flags & T_DIVISIONS)
		fputs(" of divisions: \\fIN\\fR, or "
		      "\\fB[\\fIMiB\\fB:\\fIN\\fB,\\fR...\\fB,>:\\fIN\\fB]\\fR",
		      f);
}

void put_default(FILE *f, const struct tunable_def *t)
{
	if (!*t->defval) {
		fputs("empty", f);
		return;
	}
	fputs("\\fB", f);
	put_chars(f, t->defval, strlen(t->defval), ESC_CODE | ESC_BREAK);
	fputs("\\fR", f);
	if (t->type == TT_SIZE && (t->flags & T_MIB) && is_number(t->defval))
		fputs("\\~MiB", f);
}

/* Whether put_range has anything to say. */
int has_range(const struct tunable_def *t)
{
	switch (t->type) {
	case TT_BOOL:
	case TT_ENUM:
		return 1;
	case TT_INT:
	case TT_FLOAT:
	case TT_SIZE:
		return *t->range || (t->flags & (T_AUTO | T_UNLIMITED));
	default:
		return 0;
	}
}

static void put_interval(FILE *f, const struct tunable_def *t)
{
	const char *r = t->range;
	size_t n = strlen(r);
	const char *comma = strchr(r, ',');

	if (n < 3 || !strchr("[(", r[0]) || !strchr("])", r[n - 1]) || !comma) {
		mk_warn("%s: bad range '%s' (expected an interval such as [0,1))", t->name, r);
		put_chars(f, r, n, ESC_CODE);
		return;
	}

	char *lo = xstrndup(r + 1, (size_t)(comma - r - 1));
	char *hi = xstrndup(comma + 1, (size_t)(r + n - 1 - comma - 1));
	int lo_incl = r[0] == '[', hi_incl = r[n - 1] == ']';
	char *wlo = *lo ? bound_words(lo, t) : NULL, *whi = *hi ? bound_words(hi, t) : NULL;

	if (wlo && whi && lo_incl && hi_incl)
		fprintf(f, "from %s to %s", wlo, whi);
	else if (wlo && !(t->type == TT_SIZE && strcmp(lo, "0") == 0 && lo_incl && !whi)) {
		fprintf(f, "%s %s", lo_incl ? "at least" : "greater than", wlo);
		if (whi)
			fprintf(f, " and %s %s", hi_incl ? "at most" : "less than", whi);
	} else if (whi)
		fprintf(f, "%s %s", hi_incl ? "at most" : "less than", whi);
	else
		fputs(t->type == TT_SIZE ? "any size" : "any number", f);
	free(lo);
	free(hi);
	free(wlo);
	free(whi);
}

/* The accepted values in words, as one phrase. */
void put_range(FILE *f, const struct tunable_def *t)
{
	int said = 0;

	if (t->type == TT_BOOL) {
		fputs("\\fBtrue\\fR or \\fBfalse\\fR (also yes/no, on/off, 1/0, in any case)", f);
		return;
	}
	if (t->type == TT_ENUM) {
		const char *p = t->range;

		if (!*p) {
			mk_warn("%s: an enum without values", t->name);
			fputs("(none listed)", f);
			return;
		}
		fputs("one of ", f);
		for (int i = 0; *p; i++) {
			size_t len = strcspn(p, "|");

			fputs(i ? ", \\fB" : "\\fB", f);
			put_chars(f, p, len, ESC_CODE);
			fputs("\\fR", f);
			p += len;
			if (*p == '|')
				p++;
		}
		return;
	}
	if (*t->range) {
		put_interval(f, t);
		said = 1;
	}
	if (t->flags & T_AUTO) {
		fputs(said ? ", or \\fBauto\\fR" : "\\fBauto\\fR", f);
		said = 1;
	}
	if (t->flags & T_UNLIMITED)
		fputs(said ? ", or \\fBunlimited\\fR" : "\\fBunlimited\\fR", f);
}
