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

/* One UTF-8 character at s (RFC 3629: no overlong forms, surrogates or code
 * points past U+10FFFF): its length, or 0 if it is not one. */
static size_t utf8_char(const unsigned char *s)
{
	unsigned c = s[0];
	size_t n = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xc2 && c <= 0xdf ? 2 : 0;

	if (c < 0x80)
		return 1;
	for (size_t i = 1; i < n; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	if ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] > 0x9f) ||
	    (c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] > 0x8f))
		return 0;
	return n;
}

char *tool_utf8_clean(const char *text)
{
	const unsigned char *s = (const unsigned char *)text;
	char *out = malloc(3 * strlen(text) + 1), *p = out;

	if (!out)
		return NULL;
	while (*s) {
		size_t n = utf8_char(s);

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
