/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-errors.c - error codes, their messages, and the thread-local detail message. */
#include "tap.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static void every_code_has_a_message(void **state)
{
	(void)state;
	for (int err = 0; err >= DEVCACHE_ERROR_MIN; err--) {
		const char *msg = devcache_strerror(err);

		assert_non_null(msg);
		assert_true(strlen(msg) > 3);
		assert_string_not_equal(msg, devcache_strerror(1));
		for (int other = err + 1; other <= 0; other++)
			assert_string_not_equal(msg, devcache_strerror(other));
	}
	assert_string_equal(devcache_strerror(DEVCACHE_ENOMEM), "Out of memory");
	assert_string_equal(devcache_strerror(DEVCACHE_ECONFIG), "Configuration error");
}

static void unknown_codes(void **state)
{
	(void)state;
	assert_string_equal(devcache_strerror(1), "Unknown error");
	assert_string_equal(devcache_strerror(DEVCACHE_ERROR_MIN - 1), "Unknown error");
	assert_string_equal(devcache_strerror(-1000000), "Unknown error");
}

static void detail_is_set_and_returned(void **state)
{
	(void)state;
	assert_int_equal(err_set(DEVCACHE_ENODEV, "no device '%s'", "cuda:9"), DEVCACHE_ENODEV);
	assert_string_equal(devcache_last_error(), "no device 'cuda:9'");
	err_clear();
	assert_string_equal(devcache_last_error(), "");
}

/* A long argument is cut in its middle, saying how much is left out; the
 * format's own words stay whole. */
static void detail_is_bounded_not_overrun(void **state)
{
	char big[4096];

	(void)state;
	memset(big, 'x', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	err_set(DEVCACHE_EINVAL, "%s", big);
	assert_true(strlen(devcache_last_error()) < 300);
	assert_contains(devcache_last_error(), "xxx\xe2\x80\xa6(");
	assert_contains(devcache_last_error(), " bytes left out)\xe2\x80\xa6xxx");
}

/* Each control character from input is \xNN: C0 (ESC, BEL, newline), DEL,
 * C1 (U+009B, the one-byte CSI) and bytes that are not UTF-8; printable
 * UTF-8 stays as it is. */
static void arguments_are_shown_safely(void **state)
{
	(void)state;
	err_set(DEVCACHE_EFORMAT, "tensor '%s': bad dtype", "a\x1b]0;title\x07z\x1b[2J");
	assert_string_equal(devcache_last_error(),
			    "tensor 'a\\x1b]0;title\\x07z\\x1b[2J': bad dtype");
	err_set(DEVCACHE_EFORMAT, "<%s>", "line\nnext\r\tdel\x7f");
	assert_string_equal(devcache_last_error(), "<line\\x0anext\\x0d\\x09del\\x7f>");
	err_set(DEVCACHE_EFORMAT, "<%s>", "c1\xc2\x9b" "2J \xc2\x80 \xc2\xa0");
	assert_string_equal(devcache_last_error(), "<c1\\xc2\\x9b2J \\xc2\\x80 \xc2\xa0>");
	err_set(DEVCACHE_EFORMAT, "<%s>", "bad\xff\xc3(\xed\xa0\x80 \xe0\x80\xaf");
	assert_string_equal(devcache_last_error(),
			    "<bad\\xff\\xc3(\\xed\\xa0\\x80 \\xe0\\x80\\xaf>");
	err_set(DEVCACHE_EFORMAT, "<%s>", "gr\xc3\xb6\xc3\x9f" "e \xe6\x97\xa5 \xf0\x9f\x98\x80 a\\b");
	assert_string_equal(devcache_last_error(),
			    "<gr\xc3\xb6\xc3\x9f" "e \xe6\x97\xa5 \xf0\x9f\x98\x80 a\\b>");
	err_set(DEVCACHE_EFORMAT, "<%c%c>", '\x1b', 'k');
	assert_string_equal(devcache_last_error(), "<\\x1bk>");
	/* The format's own text is the library's: its newline stays. */
	err_set(DEVCACHE_EFORMAT, "one\ntwo %s", "\n");
	assert_string_equal(devcache_last_error(), "one\ntwo \\x0a");
}

/* Shown once, shown the same again: a message quoting another one. */
static void showing_is_idempotent(void **state)
{
	char copy[1024];

	(void)state;
	err_set(DEVCACHE_EFORMAT, "f: '%s'", "\x1b[2J\xff\xc2\x9b");
	snprintf(copy, sizeof copy, "%s", devcache_last_error());
	err_set(DEVCACHE_EFORMAT, "%s", copy);
	assert_string_equal(devcache_last_error(), copy);
	err_set(DEVCACHE_EFORMAT, "%s", devcache_last_error());
	assert_string_equal(devcache_last_error(), copy);
}

static char *repeat(char c, size_t n, const char *tail)
{
	char *s = malloc(n + strlen(tail) + 1);

	assert_non_null(s);
	memset(s, c, n);
	strcpy(s + n, tail);
	return s;
}

/* A 5000-byte shard name, with a newline in it, keeps the reason. */
static void a_long_name_keeps_the_reason(void **state)
{
	char *name = repeat('A', 5000, "\nZ.safetensors");
	const char *e;

	(void)state;
	err_set(DEVCACHE_EFORMAT, "%s: the header is cut short (needs 8 bytes)", name);
	e = devcache_last_error();
	assert_true(strlen(e) < 300);
	assert_non_null(strstr(e, "AAAA\xe2\x80\xa6("));
	assert_contains(e, " bytes left out)\xe2\x80\xa6" "AAA");
	assert_contains(e, "A\\x0aZ.safetensors: the header is cut short (needs 8 bytes)");
	assert_null(strchr(e, '\n'));
	/* How many: 5014 bytes, of which the head and the tail are shown. */
	const char *mark = strstr(e, "\xe2\x80\xa6(") + 4;
	unsigned long left = strtoul(mark, NULL, 10), head = (unsigned long)(mark - 4 - e);
	const char *tail = strstr(mark, ")\xe2\x80\xa6") + 4;
	unsigned long shown_tail = (unsigned long)(strstr(tail, ": the header") - tail);

	assert_int_equal(head + left + shown_tail - 3, 5014); /* \x0a: 4 shown, 1 byte */
	free(name);
}

/* The message that a module copied aside, quoted in the next one, stays
 * whole: its reason is not the part that is cut. */
static void a_quoted_message_keeps_its_reason(void **state)
{
	char *name = repeat('n', 5000, ""), *index = repeat('i', 5000, ".index.json");
	char why[1024];
	const char *e;

	(void)state;
	err_set(DEVCACHE_ENOENT, "%s: the header states %d bytes, but the file holds only %d "
		"bytes after its first 8", name, 123456789, 42);
	snprintf(why, sizeof why, "%s", devcache_last_error());
	err_set(DEVCACHE_ENOENT, "%s: shard %s is missing: %s", index, name, why);
	e = devcache_last_error();
	assert_true(strlen(e) < 1023);
	assert_contains(e, ".index.json: shard n");
	assert_contains(e, why);
	free(name);
	free(index);
}

/* Many long names at once: cut to one length so that the format fits. */
static void the_format_s_words_always_fit(void **state)
{
	char *a = repeat('a', 900, ""), b[1024];
	const char *e;

	(void)state;
	/* b: a message of 1023 bytes, quoted: too long for what is around it. */
	memset(b, 'b', sizeof b - 1);
	b[sizeof b - 1] = '\0';
	err_set(DEVCACHE_EIO, "%s", b);
	snprintf(b, sizeof b, "%s", devcache_last_error());
	err_set(DEVCACHE_EIO, "%s %s %s %s %s %s %s: REASON %d", a, a, a, a, a, a, b, 42);
	e = devcache_last_error();
	assert_true(strlen(e) < 1024);
	assert_contains(e, ": REASON 42");
	assert_string_equal(e + strlen(e) - strlen(": REASON 42"), ": REASON 42");
	free(a);
}

/* Numbers and the rest of printf's conversions come out as snprintf has
 * them; translations may number their arguments. */
static const char *volatile nothing; /* NULL, unseen by the compiler */

static void conversions_match_printf(void **state)
{
	char want[256], got[256];

	(void)state;
	snprintf(want, sizeof want, "%d|%5u|%-4s|%.3s|%zu|%llu|%%|%x|%05llu|%.2f|%*s|%-*s|%p|%ld",
		 -7, 42u, "ab", "abcdef", (size_t)9, 123456789012ULL, 255u, 7ULL, 2.5, 4, "r", 3,
		 "l", (void *)0x1234, -5L);
	err_set(DEVCACHE_EINVAL, "%d|%5u|%-4s|%.3s|%zu|%llu|%%|%x|%05llu|%.2f|%*s|%-*s|%p|%ld", -7,
		42u, "ab", "abcdef", (size_t)9, 123456789012ULL, 255u, 7ULL, 2.5, 4, "r", 3, "l",
		(void *)0x1234, -5L);
	assert_string_equal(devcache_last_error(), want);
	err_set(DEVCACHE_EINVAL, "[%s]", "");
	assert_string_equal(devcache_last_error(), "[]");
	err_set(DEVCACHE_EINVAL, "%2$s, %1$s (%3$u)", "world", "hello", 3u);
	assert_string_equal(devcache_last_error(), "hello, world (3)");
	err_format(got, 8, "%s", "0123456789");
	assert_string_equal(got, "0123456");
	err_format(got, sizeof got, "%.*s|%s", 2, "\x1b\x1b\x1b", nothing);
	assert_string_equal(got, "\\x1b\\x1b|(null)");
}

static void *other_thread(void *arg)
{
	(void)arg;
	/* A new thread starts with an empty detail and its own. */
	if (devcache_last_error()[0] != '\0')
		return (void *)1;
	err_set(DEVCACHE_EIO, "thread detail");
	return NULL;
}

static void detail_is_per_thread(void **state)
{
	pthread_t t;
	void *ret;

	(void)state;
	err_set(DEVCACHE_EINVAL, "main detail");
	assert_int_equal(pthread_create(&t, NULL, other_thread, NULL), 0);
	assert_int_equal(pthread_join(t, &ret), 0);
	assert_null(ret);
	assert_string_equal(devcache_last_error(), "main detail");
}

static void api_misuse_is_einval_with_detail(void **state)
{
	devcache_ctx_t *ctx = NULL;
	devcache_device_t *dev;

	(void)state;
	assert_int_equal(devcache_open(NULL, NULL), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "NULL");
	assert_int_equal(devcache_device_get(NULL, "host", &dev), DEVCACHE_EINVAL);
	assert_int_equal(devcache_device_info(NULL, NULL), DEVCACHE_EINVAL);
	assert_int_equal(devcache_config_get(NULL, "caching", NULL, 0, NULL), DEVCACHE_EINVAL);
	assert_int_equal(devcache_tunable_describe(0, NULL), DEVCACHE_EINVAL);
	assert_int_equal(devcache_config_check_file(NULL, NULL, NULL), DEVCACHE_EINVAL);
	assert_int_equal(devcache_backend_info(NULL, 0, NULL), DEVCACHE_EINVAL);
	assert_int_equal(devcache_device_count(NULL), 0);
	assert_int_equal(devcache_backend_count(NULL), 0);
	devcache_close(NULL);
	devcache_set_log_handler(NULL, NULL, NULL);
	(void)ctx;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_code_has_a_message),
		cmocka_unit_test(unknown_codes),
		cmocka_unit_test(detail_is_set_and_returned),
		cmocka_unit_test(detail_is_bounded_not_overrun),
		cmocka_unit_test(arguments_are_shown_safely),
		cmocka_unit_test(showing_is_idempotent),
		cmocka_unit_test(a_long_name_keeps_the_reason),
		cmocka_unit_test(a_quoted_message_keeps_its_reason),
		cmocka_unit_test(the_format_s_words_always_fit),
		cmocka_unit_test(conversions_match_printf),
		cmocka_unit_test(detail_is_per_thread),
		cmocka_unit_test(api_misuse_is_einval_with_detail),
	};
	return RUN_TAP(tests);
}
