/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* utf8.h - UTF-8: the one decoder and encoder, and how text from input is shown to a person. */
#ifndef DEVCACHE_UTF8_H
#define DEVCACHE_UTF8_H

#include <stddef.h>
#include <stdint.h>

/*
 * Built into the library and into the devcache tool alike (it has no other
 * dependency), so a name from a file reads the same in an error message and
 * in the tool's tables.  The mf_ names are those of the model-file parsers,
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

/*
 * Text from input (a tensor name, a metadata key, a tunable's value) shown
 * to a person: printable UTF-8 stays as it is; a control character (C0,
 * DEL, and C1, U+0080 to U+009F) and each byte that is not UTF-8 become
 * \xNN, one for each of their bytes, so that no file can move the cursor,
 * retitle or clear the terminal, or break a message into lines.  A
 * backslash stays as it is: text shown once is shown the same again.
 */
#define UTF8_SHOWN_MAX 8 /* the longest form of one character: "\xc2\x9b" */
/* The character at s (n > 0 bytes left): how many bytes it takes (1 to 4);
 * its shown form goes to out, its length to *len_p. */
size_t utf8_show(const char *s, size_t n, char out[UTF8_SHOWN_MAX], size_t *len_p);
/* The length of s[0..n) shown. */
size_t utf8_shown_len(const char *s, size_t n);

#endif
