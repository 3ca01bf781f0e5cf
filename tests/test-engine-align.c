/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-engine-align.c - devcache_load_args_t.align: the host's unaligned tensors copied (and counted, and charged), the others mapped; placement said in the result and the tensor flags. */
#include "tap.h"
#include "model-writer.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <devcache.h>

TEST_TMPDIR_FIXTURE("engine-align");

/* A safetensors file whose header is hlen bytes, so that the data section
 * starts at 8 + hlen: tensors "a", "b" and "c" there, 8 bytes each, holding
 * 1..8, 9..16 and 17..24. */
static void write_odd(const char *path, size_t hlen)
{
	static const char hdr[] = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
				  "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
				  "\"c\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]}}";
	char h[512];
	unsigned char data[24];

	assert_true(hlen >= strlen(hdr) && hlen <= sizeof h);
	memset(h, ' ', hlen);
	memcpy(h, hdr, strlen(hdr));
	for (int i = 0; i < 24; i++)
		data[i] = (unsigned char)(i + 1);
	mw_raw(path, hlen, h, hlen, data, sizeof data);
}

static void check_tensor(devcache_model_t *m, const char *name, unsigned first, uint32_t min_align,
			 uint32_t flags)
{
	devcache_tensor_info_t info;
	unsigned char *p;

	if (devcache_model_tensor(m, name, &info, (void **)&p))
		fail_msg("%s: %s", name, devcache_last_error());
	for (unsigned i = 0; i < 8; i++)
		if (p[i] != first + i)
			fail_msg("%s: byte %u is %u, not %u", name, i, p[i], first + i);
	if ((uintptr_t)p % min_align)
		fail_msg("%s at %p is not aligned to %u", name, (void *)p, min_align);
	assert_true(info.align >= min_align);
	assert_int_equal(info.align, ((uintptr_t)p & -(uintptr_t)p) > 4096 ? 4096
				     : (uint32_t)((uintptr_t)p & -(uintptr_t)p));
	assert_int_equal(info.place, DEVCACHE_PLACE_HOST);
	assert_int_equal(info.flags, flags);
	assert_int_equal(info.dtype_id, DEVCACHE_DTYPE_F32);
}

static void host_align(void **state)
{
	devcache_ctx_t *ctx = mw_open_ctx(NULL);
	devcache_device_t *host = mw_device(ctx, "host");
	devcache_load_result_t r;
	devcache_load_args_t args = {.struct_size = sizeof args, .result = &r};
	devcache_cache_stats_t st;
	devcache_model_t *m, *m2;
	char path[512];

	(void)state;
	/* 8 + 312: the data at 320, a multiple of 64; b at 328 and c at 336
	 * are not. */
	snprintf(path, sizeof path, "%s/odd.safetensors", dir);
	write_odd(path, 312);

	/* No alignment asked: all mapped, zero copy, and the result says so. */
	assert_int_equal(devcache_model_load(ctx, path, host, &args, &m), 0);
	assert_int_equal(r.device_bytes, 0);
	assert_int_equal(r.host_bytes, 24);
	assert_int_equal(r.mapped_bytes, 24);
	assert_int_equal(r.aligned_copies, 0);
	check_tensor(m, "a", 1, 64, DEVCACHE_TENSOR_MAPPED);
	check_tensor(m, "b", 9, 8, DEVCACHE_TENSOR_MAPPED);
	devcache_model_release(m);

	/* 64: b and c are copied, a stays mapped; another entry of the cache. */
	args.align = 64;
	assert_int_equal(devcache_model_load(ctx, path, host, &args, &m), 0);
	assert_int_equal(r.hit, 0);
	assert_int_equal(r.aligned_copies, 2);
	assert_int_equal(r.aligned_bytes, 16);
	assert_int_equal(r.mapped_bytes, 8);
	assert_int_equal(r.bytes_read, 16);
	check_tensor(m, "a", 1, 64, DEVCACHE_TENSOR_MAPPED);
	check_tensor(m, "b", 9, 64, DEVCACHE_TENSOR_ALIGNED_COPY);
	check_tensor(m, "c", 17, 64, DEVCACHE_TENSOR_ALIGNED_COPY);
	/* The copies are charged to RAM with the file. */
	assert_int_equal(devcache_cache_stats(ctx, &st), 0);
	assert_int_equal(st.ram_used, 2 * (8 + 312 + 24) + 16);
	/* Loading it so again is a hit, with the same copies. */
	assert_int_equal(devcache_model_load(ctx, path, host, &args, &m2), 0);
	assert_int_equal(r.hit, 1);
	assert_ptr_equal(m, m2);
	assert_int_equal(r.aligned_copies, 2);
	devcache_model_release(m2);
	devcache_model_release(m);

	/* 4096, the most: every tensor is copied. */
	args.align = 4096;
	assert_int_equal(devcache_model_load(ctx, path, host, &args, &m), 0);
	assert_int_equal(r.aligned_copies, 3);
	assert_int_equal(r.mapped_bytes, 0);
	check_tensor(m, "c", 17, 4096, DEVCACHE_TENSOR_ALIGNED_COPY);
	devcache_model_release(m);

	/* Not a power of two, or too much. */
	args.align = 48;
	assert_int_equal(devcache_model_load(ctx, path, host, &args, &m), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "align 48 is not a power of two up to 4096");
	args.align = 8192;
	assert_int_equal(devcache_model_load(ctx, path, host, &args, &m), DEVCACHE_EINVAL);
	devcache_close(ctx);
}

/* The 62-byte header of the issue: every tensor 2-byte aligned in the
 * file; copied (mmap off) files are not zero copy either. */
static void copied_file(void **state)
{
	devcache_ctx_t *ctx = mw_open_ctx("mmap:false");
	devcache_load_result_t r;
	devcache_load_args_t args = {.struct_size = sizeof args, .result = &r, .align = 16};
	devcache_model_t *m;
	char path[512];

	(void)state;
	snprintf(path, sizeof path, "%s/odd62.safetensors", dir);
	write_odd(path, 190); /* data at 198: 2-byte aligned */
	assert_int_equal(devcache_model_load(ctx, path, mw_device(ctx, "host"), &args, &m), 0);
	assert_int_equal(r.mapped_bytes, 0);
	assert_int_equal(r.aligned_copies, 3);
	check_tensor(m, "a", 1, 16, DEVCACHE_TENSOR_ALIGNED_COPY);
	devcache_model_release(m);
	args.align = 0;
	assert_int_equal(devcache_model_load(ctx, path, mw_device(ctx, "host"), &args, &m), 0);
	assert_int_equal(r.mapped_bytes, 0);
	assert_int_equal(r.aligned_copies, 0);
	check_tensor(m, "a", 1, 2, 0);
	devcache_model_release(m);
	devcache_close(ctx);
}

/* On a device every tensor is placed at 256 bytes: nothing to copy, and
 * more than that cannot be had. */
static void device_align(void **state)
{
	devcache_ctx_t *ctx = mw_open_ctx(NULL);
	devcache_device_t *dev = mw_device(ctx, "good:0");
	devcache_load_result_t r;
	devcache_load_args_t args = {.struct_size = sizeof args, .result = &r, .align = 256};
	devcache_tensor_info_t info;
	devcache_model_t *m;
	char path[512];
	void *p;

	(void)state;
	snprintf(path, sizeof path, "%s/dev.safetensors", dir);
	write_odd(path, 190);
	assert_int_equal(devcache_model_load(ctx, path, dev, &args, &m), 0);
	assert_int_equal(r.aligned_copies, 0);
	assert_int_equal(r.mapped_bytes, 0);
	assert_int_equal(r.device_bytes, 24);
	assert_int_equal(devcache_model_tensor(m, "b", &info, &p), 0);
	assert_int_equal(info.place, DEVCACHE_PLACE_DEVICE);
	assert_int_equal((uintptr_t)p % 256, 0);
	assert_true(info.align >= 256);
	assert_int_equal(info.flags, 0);
	devcache_model_release(m);
	args.align = 512;
	assert_int_equal(devcache_model_load(ctx, path, dev, &args, &m), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "align 512 is more than the 256 bytes good:0's tensors");
	devcache_close(ctx);
}

/* A partial load: the tensors left on the host are the mapping's, so
 * they are copied to meet align as a host load's are; every one of them,
 * as any tensor may be moved to the host later. */
static void partial_align(void **state)
{
	devcache_ctx_t *ctx = mw_open_ctx("max_cache_vram:256,partial_loading:true");
	devcache_device_t *dev = mw_device(ctx, "good:0");
	devcache_load_result_t r;
	devcache_load_args_t args = {.struct_size = sizeof args, .result = &r, .align = 16};
	devcache_tensor_info_t info;
	devcache_model_t *m;
	char path[512];
	void *p;

	(void)state;
	snprintf(path, sizeof path, "%s/partial.safetensors", dir);
	write_odd(path, 190); /* data at 198: 2-byte aligned */
	assert_int_equal(devcache_model_load(ctx, path, dev, &args, &m), 0);
	assert_int_equal(r.device_bytes, 8);
	assert_int_equal(r.host_bytes, 16);
	assert_int_equal(r.aligned_copies, 3);
	assert_int_equal(r.aligned_bytes, 24);
	assert_int_equal(devcache_model_tensor(m, "a", &info, &p), 0);
	assert_int_equal(info.place, DEVCACHE_PLACE_DEVICE);
	assert_true(info.align >= 16);
	check_tensor(m, "b", 9, 16, DEVCACHE_TENSOR_ALIGNED_COPY);
	check_tensor(m, "c", 17, 16, DEVCACHE_TENSOR_ALIGNED_COPY);
	/* Moved to the host, "a" is its aligned copy too. */
	assert_int_equal(devcache_model_move_to_host(m, (const char *const[]){"a"}, 1), 0);
	check_tensor(m, "a", 1, 16, DEVCACHE_TENSOR_ALIGNED_COPY);
	devcache_model_release(m);
	devcache_close(ctx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		TMPDIR_TEST(host_align),
		TMPDIR_TEST(copied_file),
		TMPDIR_TEST(device_align),
		TMPDIR_TEST(partial_align),
	};

	return RUN_TAP(tests);
}
