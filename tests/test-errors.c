/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-errors.c - error codes, their messages, and the thread-local detail message. */
#include "tap.h"

#include <pthread.h>

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

static void detail_is_truncated_not_overrun(void **state)
{
	char big[4096];

	(void)state;
	memset(big, 'x', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	err_set(DEVCACHE_EINVAL, "%s", big);
	assert_true(strlen(devcache_last_error()) < sizeof big - 1);
	assert_true(strlen(devcache_last_error()) > 512);
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
		cmocka_unit_test(detail_is_truncated_not_overrun),
		cmocka_unit_test(detail_is_per_thread),
		cmocka_unit_test(api_misuse_is_einval_with_detail),
	};
	return RUN_TAP(tests);
}
