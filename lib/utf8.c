/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* utf8.c - UTF-8: the one decoder and encoder of the library and the tool. */
#include "utf8.h"

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
