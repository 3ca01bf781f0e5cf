/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* text.c - how the devcache tool writes for a person: byte counts, widths, lines that fit the terminal. */
#include "tool.h"

#include <stdlib.h>
#include <string.h>

/* Continuation bytes of UTF-8 take no column. */
static bool starts_char(char c)
{
	return ((unsigned char)c & 0xc0) != 0x80;
}

static size_t width_n(const char *s, size_t n)
{
	size_t w = 0;

	for (size_t i = 0; i < n; i++)
		w += starts_char(s[i]);
	return w;
}

size_t tool_width(const char *s)
{
	return width_n(s, strlen(s));
}

/* How many bytes of s fit in cols columns, whole characters only. */
static size_t fit(const char *s, size_t n, size_t cols)
{
	size_t i = 0, w = 0;

	while (i < n) {
		size_t j = i + 1;

		while (j < n && !starts_char(s[j]))
			j++;
		if (w + 1 > cols)
			break;
		w++;
		i = j;
	}
	return i;
}

void tool_wrap(FILE *out, size_t first_width, size_t indent, const char *text)
{
	if (indent > TOOL_COLUMNS / 2)
		indent = TOOL_COLUMNS / 2;
	size_t col = first_width;
	const char *p = text;
	bool line_start = true;

	while (*p) {
		size_t n = strcspn(p, " \n"), w = width_n(p, n);

		if (n == 0) {
			if (*p == '\n' && p[1])
				fprintf(out, "\n%*s", (int)indent, ""), col = indent, line_start = true;
			p++;
			continue;
		}
		/* The space before the word, if it is not the first of its line. */
		bool sep = !line_start;

		if (col + sep + w > TOOL_COLUMNS && !line_start) {
			fprintf(out, "\n%*s", (int)indent, "");
			col = indent;
			sep = false;
		}
		if (sep)
			putc(' ', out), col++;
		while (col + w > TOOL_COLUMNS) { /* a word longer than a line */
			size_t part = col < TOOL_COLUMNS ? fit(p, n, TOOL_COLUMNS - col) : 0;

			fwrite(p, 1, part, out);
			fprintf(out, "\n%*s", (int)indent, "");
			col = indent;
			p += part, n -= part, w = width_n(p, n);
		}
		fwrite(p, 1, n, out);
		line_start = false;
		col += w;
		p += n;
	}
	putc('\n', out);
}

char *tool_utf8_clean(const char *text)
{
	const unsigned char *s = (const unsigned char *)text, *end = s + strlen(text);
	char *out = malloc(3 * (size_t)(end - s) + 1), *p = out;

	if (!out)
		return NULL;
	while (s < end) {
		size_t n = mf_utf8_seq(s, (size_t)(end - s));

		if (n) {
			memcpy(p, s, n);
			p += n, s += n;
		} else {
			memcpy(p, "\xef\xbf\xbd", 3); /* U+FFFD */
			p += 3, s++;
		}
	}
	*p = '\0';
	return out;
}

/* The tool is single-threaded: a few buffers in turn, so that one call's
 * text can sit beside the next ones' in a printf. */
#define SHOWN_SLOTS 8

const char *tool_shown(const char *s)
{
	static char *slot[SHOWN_SLOTS];
	static size_t cap[SHOWN_SLOTS];
	static unsigned next;
	unsigned k = next++ % SHOWN_SLOTS;
	size_t n = strlen(s), len = utf8_shown_len(s, n), at = 0, one;

	if (len == n)
		return s;
	if (len + 1 > cap[k]) {
		char *p = realloc(slot[k], len + 1);

		if (!p)
			return "?";
		slot[k] = p;
		cap[k] = len + 1;
	}
	for (size_t i = 0; i < n; at += one)
		i += utf8_show(s + i, n - i, slot[k] + at, &one);
	slot[k][at] = '\0';
	return slot[k];
}

