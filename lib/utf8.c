/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* utf8.c - UTF-8: the one decoder and encoder, and how text from input is shown to a person. */
#include "utf8.h"

#include <stdbool.h>
#include <string.h>

size_t mf_utf8_seq(const unsigned char *s, size_t n)
{
	unsigned char b = s[0];
	size_t len;
	uint32_t cp;

	if (b < 0x80)
		return 1;
	if (b >= 0xc2 && b <= 0xdf)
		len = 2, cp = b & 0x1f;
	else if (b >= 0xe0 && b <= 0xef)
		len = 3, cp = b & 0x0f;
	else if (b >= 0xf0 && b <= 0xf4)
		len = 4, cp = b & 0x07;
	else
		return 0;
	if (len > n)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

size_t mf_utf8_put(uint32_t cp, char *out)
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xc0 | cp >> 6);
		out[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xe0 | cp >> 12);
		out[1] = (char)(0x80 | (cp >> 6 & 0x3f));
		out[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	out[0] = (char)(0xf0 | cp >> 18);
	out[1] = (char)(0x80 | (cp >> 12 & 0x3f));
	out[2] = (char)(0x80 | (cp >> 6 & 0x3f));
	out[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

size_t mf_utf8_invalid_at(const unsigned char *s, size_t len)
{
	for (size_t i = 0, n; i < len; i += n) {
		/* A header is mostly ASCII. */
		while (i < len && s[i] < 0x80)
			i++;
		if (i == len)
			break;
		if (!(n = mf_utf8_seq(s + i, len - i)))
			return i;
	}
	return len;
}

size_t utf8_show(const char *s, size_t n, char out[UTF8_SHOWN_MAX], size_t *len_p)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *u = (const unsigned char *)s;
	size_t seq = mf_utf8_seq(u, n), take = seq ? seq : 1;
	/* C0 and DEL; C1 is U+0080..U+009F, 0xc2 0x80..0x9f in UTF-8. */
	bool control = seq == 0 || (seq == 1 && (u[0] < 0x20 || u[0] == 0x7f)) ||
		       (seq == 2 && u[0] == 0xc2 && u[1] <= 0x9f);

	if (!control) {
		memcpy(out, s, take);
		*len_p = take;
		return take;
	}
	for (size_t i = 0; i < take; i++) {
		out[4 * i] = '\\';
		out[4 * i + 1] = 'x';
		out[4 * i + 2] = hex[u[i] >> 4];
		out[4 * i + 3] = hex[u[i] & 0xf];
	}
	*len_p = 4 * take;
	return take;
}

size_t utf8_shown_len(const char *s, size_t n)
{
	char unit[UTF8_SHOWN_MAX];
	size_t len = 0, shown;

	for (size_t i = 0; i < n; len += shown)
		i += utf8_show(s + i, n - i, unit, &shown);
	return len;
}
