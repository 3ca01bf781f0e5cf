/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* utf8.h - UTF-8: the one decoder and encoder of the library and the tool. */
#ifndef DEVCACHE_UTF8_H
#define DEVCACHE_UTF8_H

#include <stddef.h>
#include <stdint.h>

/*
 * Built into the library and into the devcache tool alike (it has no other
 * dependency).  The mf_ names are those of the model-file parsers,
 * their first users.
 */

/* UTF-8 as RFC 3629 has it (no overlong forms, surrogates or code points
 * past U+10FFFF): the length of the sequence at s (1 to 4) or 0 if the
 * bytes there are not one; and where the first such place in s is, or len. */
size_t mf_utf8_seq(const unsigned char *s, size_t n);
size_t mf_utf8_invalid_at(const unsigned char *s, size_t len);
/* Write code point cp (at most U+10FFFF, no surrogate) to out as UTF-8;
 * return how many bytes (1 to 4). */
size_t mf_utf8_put(uint32_t cp, char *out);

#endif
