/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-host.c - the built-in host backend through the vtable the allocator will use. */
#include "tap.h"

#include <stdio.h>

#include "backend.h"

struct fixture {
	devcache_ctx_t *ctx;
	devcache_device_t *dev;
	const struct devcache_backend_ops *ops;
	void *st;
};

static int setup(void **state)
{
	static struct fixture f;
	devcache_open_args_t args = {.struct_size = sizeof args,
				     .flags = DEVCACHE_OPEN_NO_FILES | DEVCACHE_OPEN_NO_ENV};

	memset(&f, 0, sizeof f);
	if (devcache_open_ex(&f.ctx, &args) || devcache_device_get(f.ctx, "host", &f.dev))
		return -1;
	f.ops = f.dev->backend->ops;
	f.st = f.dev->backend->state;
	*state = &f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	devcache_close(f->ctx);
	return 0;
}

static void host_is_the_first_device(void **state)
{
	struct fixture *f = *state;
	devcache_device_t *first, *alias;
	devcache_device_info_t info;

	assert_true(devcache_device_count(f->ctx) >= 1);
	assert_int_equal(devcache_device_at(f->ctx, 0, &first), 0);
	assert_ptr_equal(first, f->dev);
	assert_int_equal(devcache_device_get(f->ctx, "host:0", &alias), 0);
	assert_ptr_equal(alias, f->dev);
	assert_int_equal(devcache_device_info(f->dev, &info), 0);
	assert_string_equal(info.id, "host");
	assert_string_equal(info.backend, "host");
	assert_int_equal(info.ordinal, 0);
	assert_contains(info.name, "Host memory");
	assert_true(info.total_memory > (64u << 20));
	assert_true(info.free_memory > 0 && info.free_memory <= info.total_memory);
	assert_true(info.caps & DEVCACHE_CAP_HOST_MEMORY);
	/* Reserve, map and unmap, for expandable segments. */
	assert_true(info.caps & DEVCACHE_CAP_VMM);
}

static void alloc_copy_free_round_trip(void **state)
{
	struct fixture *f = *state;
	static const size_t sizes[] = {0, 1, 511, 4096, 3 << 20};

	for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
		size_t n = sizes[k] ? sizes[k] : 1;
		unsigned char *src = malloc(n), *back = malloc(n);
		void *dptr = NULL;

		assert_non_null(src);
		assert_non_null(back);
		for (size_t i = 0; i < n; i++)
			src[i] = (unsigned char)(i * 131 + k);
		assert_int_equal(f->ops->mem_alloc(f->st, 0, sizes[k], &dptr), 0);
		assert_non_null(dptr);
		assert_int_equal((uintptr_t)dptr % 512, 0);
		assert_int_equal(f->ops->memcpy_htod(f->st, 0, dptr, src, n, NULL), 0);
		memset(back, 0, n);
		assert_int_equal(f->ops->memcpy_dtoh(f->st, 0, back, dptr, n, NULL), 0);
		assert_memory_equal(src, back, n);
		assert_int_equal(f->ops->mem_free(f->st, 0, dptr), 0);
		free(src);
		free(back);
	}
	assert_int_equal(f->ops->mem_free(f->st, 0, NULL), 0);
}

static void impossible_allocation_fails_cleanly(void **state)
{
	struct fixture *f = *state;
	void *p = (void *)1;

	assert_int_equal(f->ops->mem_alloc(f->st, 0, SIZE_MAX, &p), DEVCACHE_ENOMEM);
	assert_contains(devcache_last_error(), "cannot allocate");
	assert_int_equal(f->ops->mem_alloc(f->st, 0, SIZE_MAX / 4, &p), DEVCACHE_ENOMEM);
	assert_contains(devcache_last_error(), "host:");
}

static void pinned_host_memory(void **state)
{
	struct fixture *f = *state;
	char *p = NULL;

	assert_int_equal(f->ops->host_alloc(f->st, 1 << 20, (void **)&p), 0);
	memset(p, 0x5a, 1 << 20);
	assert_int_equal(f->ops->host_free(f->st, p), 0);
}

static void streams_and_events(void **state)
{
	struct fixture *f = *state;
	devcache_stream_t s1 = NULL, s2 = NULL;
	devcache_event_t ev = NULL;

	assert_int_equal(f->ops->stream_create(f->st, 0, &s1), 0);
	assert_int_equal(f->ops->stream_create(f->st, 0, &s2), 0);
	assert_non_null(s1);
	assert_ptr_not_equal(s1, s2);
	assert_int_equal(f->ops->event_create(f->st, 0, &ev), 0);
	assert_int_equal(f->ops->event_record(f->st, 0, ev, s1), 0);
	/* Host copies complete before they return: a recorded event is done. */
	assert_int_equal(f->ops->event_query(f->st, 0, ev), 0);
	assert_int_equal(f->ops->event_synchronize(f->st, 0, ev), 0);
	assert_int_equal(f->ops->stream_synchronize(f->st, 0, s1), 0);
	assert_int_equal(f->ops->stream_synchronize(f->st, 0, NULL), 0);
	assert_int_equal(f->ops->event_destroy(f->st, 0, ev), 0);
	assert_int_equal(f->ops->stream_destroy(f->st, 0, s1), 0);
	assert_int_equal(f->ops->stream_destroy(f->st, 0, s2), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(host_is_the_first_device),
		cmocka_unit_test(alloc_copy_free_round_trip),
		cmocka_unit_test(impossible_allocation_fails_cleanly),
		cmocka_unit_test(pinned_host_memory),
		cmocka_unit_test(streams_and_events),
	};
	return cmocka_set_message_output(CM_OUTPUT_TAP), cmocka_run_group_tests(tests, setup, teardown);
}
