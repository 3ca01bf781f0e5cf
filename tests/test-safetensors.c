/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-safetensors.c - the safetensors reader: valid files of every kind, and one malformed file for each rule it enforces. */
#include "config.h"

#include "tap.h"
#include "model-writer.h"

#include <devcache.h>

#include <signal.h>
#include <stdbool.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

TEST_TMPDIR_FIXTURE("safetensors");

static const char *path_of(const char *name)
{
	static char path[4][256];
	static int next;
	char *p = path[next++ % 4];

	snprintf(p, sizeof path[0], "%s/%s", dir, name);
	return p;
}

/* ---- writing files ------------------------------------------------------------------ */

/* A file of the 8-byte little-endian number n, then len bytes of body:
 * n need not be the truth. */
static const char *write_raw(const char *name, uint64_t n, const void *body, size_t len)
{
	const char *path = path_of(name);

	mw_raw(path, n, body, len, NULL, 0);
	return path;
}

/* A safetensors file: the header (hlen bytes, its true length) and then
 * data_len bytes of data (a pattern, so that no two tensors look alike). */
static const char *write_st_n(const char *name, const char *header, size_t hlen, size_t data_len)
{
	unsigned char *data = malloc(data_len + 1);
	const char *path = path_of(name);

	assert_non_null(data);
	for (size_t i = 0; i < data_len; i++)
		data[i] = (unsigned char)(i * 7 + 1);
	mw_raw(path, hlen, header, hlen, data, data_len);
	free(data);
	return path;
}

static const char *write_st(const char *name, const char *header, size_t data_len)
{
	return write_st_n(name, header, strlen(header), data_len);
}

/* ---- reading them back -------------------------------------------------------------- */

static devcache_model_file_t *open_ok(const char *path)
{
	devcache_model_file_t *mf = NULL;
	int rc = devcache_model_file_open(path, &mf);

	if (rc)
		fail_msg("%s: %s (%d)", path, devcache_last_error(), rc);
	assert_non_null(mf);
	assert_int_equal(devcache_model_file_format(mf, NULL), DEVCACHE_FORMAT_SAFETENSORS);
	return mf;
}

/* The file is refused as malformed, with a message that names it and the fault. */
static void expect_bad_file(const char *path, const char *fault)
{
	devcache_model_file_t *mf = (devcache_model_file_t *)&mf;

	assert_int_equal(devcache_model_file_open(path, &mf), DEVCACHE_EFORMAT);
	assert_null(mf);
	assert_contains(devcache_last_error(), path);
	assert_contains(devcache_last_error(), fault);
}

static void expect_bad(const char *name, const char *header, size_t data_len, const char *fault)
{
	expect_bad_file(write_st(name, header, data_len), fault);
}

static void check_tensor(const devcache_model_file_t *mf, size_t index, const char *name,
			 const char *dtype, unsigned n_dims, const uint64_t *shape, uint64_t begin,
			 uint64_t size)
{
	devcache_tensor_info_t t;

	assert_int_equal(devcache_model_file_tensor(mf, index, &t), 0);
	assert_string_equal(t.name, name);
	assert_string_equal(t.dtype, dtype);
	assert_int_equal(t.n_dims, n_dims);
	for (unsigned i = 0; i < n_dims; i++)
		assert_int_equal(t.shape[i], shape[i]);
	assert_int_equal(t.offset, devcache_model_file_data_offset(mf) + begin);
	assert_int_equal(t.size, size);
}

static void check_meta(const devcache_model_file_t *mf, size_t index, const char *key,
		       const char *value_json)
{
	const char *k, *v;

	assert_int_equal(devcache_model_file_metadata(mf, index, &k, &v), 0);
	assert_string_equal(k, key);
	assert_string_equal(v, value_json);
}

#define T(name, dtype, shape, b, e) \
	"\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

/* ---- valid files -------------------------------------------------------------------- */

static const struct {
	const char *dtype;
	uint64_t bytes; /* for shape [2, 4] */
} every_dtype[] = {
	{"BOOL", 8},    {"U8", 8},           {"I8", 8},           {"F8_E5M2", 8},
	{"F8_E4M3", 8}, {"F8_E8M0", 8},      {"F8_E4M3FNUZ", 8},  {"F8_E5M2FNUZ", 8},
	{"I16", 16},    {"U16", 16},         {"F16", 16},         {"BF16", 16},
	{"I32", 32},    {"U32", 32},         {"F32", 32},         {"C64", 64},
	{"F64", 64},    {"I64", 64},         {"U64", 64},         {"F4", 4},
	{"F6_E2M3", 6}, {"F6_E3M2", 6},
};

static void every_dtype_has_its_size(void **state)
{
	const size_t n = sizeof every_dtype / sizeof every_dtype[0];
	static const uint64_t shape[] = {2, 4};
	char header[8192];
	size_t used = 0;
	uint64_t off = 0;

	(void)state;
	used += (size_t)snprintf(header, sizeof header, "{");
	for (size_t i = 0; i < n; i++) {
		used += (size_t)snprintf(header + used, sizeof header - used,
					 "%s\"t_%s\":{\"dtype\":\"%s\",\"shape\":[2,4],\"data_offsets\":[%llu,%llu]}",
					 i ? "," : "", every_dtype[i].dtype, every_dtype[i].dtype,
					 (unsigned long long)off,
					 (unsigned long long)(off + every_dtype[i].bytes));
		off += every_dtype[i].bytes;
	}
	snprintf(header + used, sizeof header - used, "}");

	devcache_model_file_t *mf = open_ok(write_st("dtypes.safetensors", header, off));
	unsigned version = 99;
	assert_int_equal(devcache_model_file_format(mf, &version), DEVCACHE_FORMAT_SAFETENSORS);
	assert_int_equal(version, 0);
	assert_int_equal(devcache_model_file_data_offset(mf), 8 + strlen(header));
	assert_int_equal(devcache_model_file_size(mf), 8 + strlen(header) + off);
	assert_int_equal(devcache_model_file_tensor_count(mf), n);
	assert_int_equal(devcache_model_file_metadata_count(mf), 0);
	off = 0;
	for (size_t i = 0; i < n; i++) {
		char name[32];

		snprintf(name, sizeof name, "t_%s", every_dtype[i].dtype);
		check_tensor(mf, i, name, every_dtype[i].dtype, 2, shape, off, every_dtype[i].bytes);
		off += every_dtype[i].bytes;
	}
	devcache_model_file_close(mf);
}

static void scalar_has_one_element(void **state)
{
	(void)state;
	devcache_model_file_t *mf =
		open_ok(write_st("scalar.safetensors", "{" T("s", "F64", "[]", 0, 8) "}", 8));

	assert_int_equal(devcache_model_file_tensor_count(mf), 1);
	check_tensor(mf, 0, "s", "F64", 0, NULL, 0, 8);
	devcache_model_file_close(mf);
}

static void zero_sized_tensors_share_offsets(void **state)
{
	static const uint64_t s4[] = {4}, s03[] = {0, 3}, s2[] = {2}, s302[] = {3, 0, 2}, s0[] = {0};

	(void)state;
	devcache_model_file_t *mf = open_ok(write_st(
		"zero.safetensors",
		"{" T("first", "F16", "[0]", 0, 0) "," T("a", "F32", "[4]", 0, 16) ","
		T("empty", "F32", "[0,3]", 16, 16) "," T("b", "U8", "[2]", 16, 18) ","
		T("z", "BF16", "[3,0,2]", 18, 18) "}",
		18));

	assert_int_equal(devcache_model_file_tensor_count(mf), 5);
	check_tensor(mf, 0, "first", "F16", 1, s0, 0, 0);
	check_tensor(mf, 1, "a", "F32", 1, s4, 0, 16);
	check_tensor(mf, 2, "empty", "F32", 2, s03, 16, 0);
	check_tensor(mf, 3, "b", "U8", 1, s2, 16, 2);
	check_tensor(mf, 4, "z", "BF16", 3, s302, 18, 0);
	devcache_model_file_close(mf);

	/* Nothing but zero-sized tensors: no data at all. */
	mf = open_ok(write_st("zero-only.safetensors",
			      "{" T("e", "F32", "[0]", 0, 0) "," T("f", "I64", "[5,0]", 0, 0) "}", 0));
	assert_int_equal(devcache_model_file_tensor_count(mf), 2);
	assert_int_equal(devcache_model_file_data_offset(mf), devcache_model_file_size(mf));
	devcache_model_file_close(mf);
}

static void sixteen_dimensions_are_allowed(void **state)
{
	static const uint64_t ones[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2};

	(void)state;
	devcache_model_file_t *mf = open_ok(write_st(
		"rank16.safetensors",
		"{" T("r", "U8", "[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,2]", 0, 2) "}", 2));

	check_tensor(mf, 0, "r", "U8", 16, ones, 0, 2);
	devcache_model_file_close(mf);
}

static void metadata_comes_in_file_order_as_json_strings(void **state)
{
	(void)state;
	devcache_model_file_t *mf = open_ok(write_st(
		"meta.safetensors",
		"{\"__metadata__\":{\"format\":\"pt\",\"zeta\":\"say \\\"hi\\\"\\n\\\\ / \\u00e9\\u0001\","
		"\"alpha\":\"\",\"emoji\":\"\\ud83d\\ude00\"},"
		T("w", "U8", "[1]", 0, 1) "}",
		1));

	assert_int_equal(devcache_model_file_metadata_count(mf), 4);
	check_meta(mf, 0, "format", "\"pt\"");
	check_meta(mf, 1, "zeta", "\"say \\\"hi\\\"\\n\\\\ / \xc3\xa9\\u0001\"");
	check_meta(mf, 2, "alpha", "\"\"");
	check_meta(mf, 3, "emoji", "\"\xf0\x9f\x98\x80\"");
	const char *k, *v;
	assert_int_equal(devcache_model_file_metadata(mf, 4, &k, &v), DEVCACHE_ENOENT);
	devcache_model_file_close(mf);

	/* After the tensors, and empty. */
	mf = open_ok(write_st("meta-last.safetensors",
			      "{" T("w", "U8", "[1]", 0, 1) ",\"__metadata__\":{\"b\":\"1\",\"a\":\"2\"}}", 1));
	assert_int_equal(devcache_model_file_tensor_count(mf), 1);
	assert_int_equal(devcache_model_file_metadata_count(mf), 2);
	check_meta(mf, 0, "b", "\"1\"");
	check_meta(mf, 1, "a", "\"2\"");
	devcache_model_file_close(mf);
	mf = open_ok(write_st("meta-empty.safetensors", "{\"__metadata__\":{}}", 0));
	assert_int_equal(devcache_model_file_metadata_count(mf), 0);
	assert_int_equal(devcache_model_file_tensor_count(mf), 0);
	devcache_model_file_close(mf);
}

static void header_padding_is_part_of_the_header(void **state)
{
	static const uint64_t s3[] = {3};
	char header[128];

	(void)state;
	/* As the reference writes it: spaces up to a multiple of 8. */
	snprintf(header, sizeof header, "%s", "{" T("w", "U8", "[3]", 0, 3) "}");
	while (strlen(header) % 8)
		strcat(header, " ");
	strcat(header, "        ");
	devcache_model_file_t *mf = open_ok(write_st("padded.safetensors", header, 3));
	assert_int_equal(devcache_model_file_data_offset(mf), 8 + strlen(header));
	check_tensor(mf, 0, "w", "U8", 1, s3, 0, 3);
	devcache_model_file_close(mf);

	/* Any JSON whitespace, as serde_json allows after the value. */
	mf = open_ok(write_st("padded-ws.safetensors", "{" T("w", "U8", "[3]", 0, 3) "}\n\t\r ", 3));
	check_tensor(mf, 0, "w", "U8", 1, s3, 0, 3);
	devcache_model_file_close(mf);
}

static void empty_header_with_no_data(void **state)
{
	(void)state;
	devcache_model_file_t *mf = open_ok(write_st("empty.safetensors", "{}", 0));

	assert_int_equal(devcache_model_file_tensor_count(mf), 0);
	assert_int_equal(devcache_model_file_metadata_count(mf), 0);
	assert_int_equal(devcache_model_file_data_offset(mf), 10);
	devcache_model_file_close(mf);
	mf = open_ok(write_st("empty-padded.safetensors", "{}      ", 0));
	assert_int_equal(devcache_model_file_data_offset(mf), 16);
	devcache_model_file_close(mf);
}

static void tensors_keep_file_order_and_are_found_by_name(void **state)
{
	static const uint64_t s1[] = {1};
	devcache_tensor_info_t t;

	(void)state;
	devcache_model_file_t *mf = open_ok(write_st(
		"order.safetensors",
		"{" T("zz", "F32", "[1]", 8, 12) "," T("aa", "F32", "[1]", 0, 4) ","
		T("mm", "F32", "[1]", 4, 8) "}",
		12));

	assert_int_equal(devcache_model_file_tensor_count(mf), 3);
	check_tensor(mf, 0, "zz", "F32", 1, s1, 8, 4);
	check_tensor(mf, 1, "aa", "F32", 1, s1, 0, 4);
	check_tensor(mf, 2, "mm", "F32", 1, s1, 4, 4);
	assert_int_equal(devcache_model_file_tensor(mf, 3, &t), DEVCACHE_ENOENT);

	assert_int_equal(devcache_model_file_find(mf, "aa", &t), 0);
	assert_string_equal(t.name, "aa");
	assert_int_equal(t.offset, devcache_model_file_data_offset(mf));
	assert_int_equal(devcache_model_file_find(mf, "zz", &t), 0);
	assert_int_equal(t.offset, devcache_model_file_data_offset(mf) + 8);
	assert_int_equal(devcache_model_file_find(mf, "mm", &t), 0);
	assert_int_equal(t.size, 4);
	assert_int_equal(devcache_model_file_find(mf, "nope", &t), DEVCACHE_ENOENT);
	assert_contains(devcache_last_error(), "nope");
	devcache_model_file_close(mf);
}

static void escaped_names_are_decoded(void **state)
{
	devcache_tensor_info_t t;

	(void)state;
	devcache_model_file_t *mf = open_ok(write_st(
		"escaped.safetensors",
		"{" T("\\u00e9t\\u00e9", "U8", "[1]", 0, 1) "," T("a\\\"b", "U8", "[1]", 1, 2) ","
		T("\\ud83d\\ude00", "U8", "[1]", 2, 3) "}",
		3));

	assert_int_equal(devcache_model_file_find(mf, "\xc3\xa9t\xc3\xa9", &t), 0);
	assert_int_equal(t.offset, devcache_model_file_data_offset(mf));
	assert_int_equal(devcache_model_file_find(mf, "a\"b", &t), 0);
	assert_int_equal(devcache_model_file_find(mf, "\xf0\x9f\x98\x80", &t), 0);
	assert_int_equal(t.offset, devcache_model_file_data_offset(mf) + 2);
	devcache_model_file_close(mf);
}

/* ---- the file and the header length -------------------------------------------------- */

static void shorter_than_nine_bytes_is_not_safetensors(void **state)
{
	(void)state;
	expect_bad_file(write_raw("short.safetensors", 2, "{}", 0), "neither a safetensors nor a GGUF file");
	expect_bad_file(write_raw("five.safetensors", 0, NULL, 0), "neither a safetensors nor a GGUF file");
}

/* A FIFO named as a model (or as a shard index) is refused at once: open()
 * must not wait for a writer.  The alarm turns a hang into a failure. */
static void a_fifo_is_refused_without_blocking(void **state)
{
	const char *names[] = {"fifo.safetensors", "fifo.safetensors.index.json"};
	devcache_model_file_t *mf = NULL;

	(void)state;
	for (size_t i = 0; i < 2; i++) {
		const char *path = path_of(names[i]);

		unlink(path);
		assert_int_equal(mkfifo(path, 0600), 0);
		alarm(10);
		int rc = devcache_model_file_open(path, &mf);
		alarm(0);
		assert_int_equal(rc, DEVCACHE_EINVAL);
		assert_null(mf);
		assert_non_null(strstr(devcache_last_error(), "not a regular file"));
		assert_non_null(strstr(devcache_last_error(), names[i]));
		unlink(path);
	}
}

static void no_brace_at_byte_8_is_not_safetensors(void **state)
{
	(void)state;
	expect_bad_file(write_raw("array.safetensors", 4, "[1,2]", 5),
			"neither a safetensors nor a GGUF file");
	expect_bad_file(write_raw("space.safetensors", 3, " {}", 3),
			"neither a safetensors nor a GGUF file");
}

static void header_length_over_the_limit(void **state)
{
	(void)state;
	expect_bad_file(write_raw("limit.safetensors", 100000001, "{}", 2),
			"header length 100000001 is larger than the limit of 100000000 bytes");
	expect_bad_file(write_raw("max.safetensors", UINT64_MAX, "{}", 2),
			"header length 18446744073709551615 is larger than the limit");
}

static void header_length_beyond_the_file(void **state)
{
	(void)state;
	expect_bad_file(write_raw("beyond.safetensors", 100, "{}", 2),
			"header length 100 is larger than the file (10 bytes)");
	expect_bad_file(write_raw("beyond1.safetensors", 3, "{}", 2),
			"header length 3 is larger than the file (10 bytes)");
}

/* A length just under the limit on a tiny file is refused from the sizes
 * alone, before anything is allocated or read. */
static void lying_header_length_is_refused(void **state)
{
	(void)state;
	expect_bad_file(write_raw("lying.safetensors", 99999999, "{\"a\":1}", 7),
			"header length 99999999 is larger than the file (15 bytes)");
}

/* ---- UTF-8 ---------------------------------------------------------------------------- */

/* A metadata value holding bad, and where the header goes wrong in the file. */
static void expect_bad_utf8(const char *name, const char *bad)
{
	static const char prefix[] = "{\"__metadata__\":{\"k\":\"";
	char header[128], fault[64];

	snprintf(header, sizeof header, "%s%s\"}}", prefix, bad);
	snprintf(fault, sizeof fault, "the header is not valid UTF-8 (byte %zu)", 8 + strlen(prefix));
	expect_bad(name, header, 0, fault);
}

static void utf8_bad_continuation(void **state)
{
	(void)state;
	expect_bad_utf8("utf8-cont.safetensors", "\xc3\x28");
	expect_bad_utf8("utf8-cont3.safetensors", "\xe2\x82\x28");
	expect_bad_utf8("utf8-lone.safetensors", "\x80");
}

static void utf8_overlong(void **state)
{
	(void)state;
	expect_bad_utf8("utf8-c0.safetensors", "\xc0\xaf");
	expect_bad_utf8("utf8-c1.safetensors", "\xc1\xbf");
	expect_bad_utf8("utf8-e0.safetensors", "\xe0\x80\xaf");
	expect_bad_utf8("utf8-f0.safetensors", "\xf0\x82\x82\xac");
}

static void utf8_surrogate(void **state)
{
	(void)state;
	expect_bad_utf8("utf8-hi.safetensors", "\xed\xa0\x80");
	expect_bad_utf8("utf8-lo.safetensors", "\xed\xbf\xbf");
}

static void utf8_above_u10ffff(void **state)
{
	(void)state;
	expect_bad_utf8("utf8-f4.safetensors", "\xf4\x90\x80\x80");
	expect_bad_utf8("utf8-f5.safetensors", "\xf5\x80\x80\x80");
	expect_bad_utf8("utf8-ff.safetensors", "\xff");
}

static void utf8_cut_short_by_the_end(void **state)
{
	(void)state;
	expect_bad("utf8-end.safetensors", "{\"__metadata__\":{\"k\":\"\xe2\x82", 0,
		   "the header is not valid UTF-8 (byte 30)");
}

/* ---- JSON ------------------------------------------------------------------------------ */

static void not_json(void **state)
{
	(void)state;
	expect_bad("notjson.safetensors", "{\"w\": }", 0, "the header is not JSON: ");
	expect_bad("braced-array.safetensors", "{[1,2]}", 0, "the header is not JSON: ");
	expect_bad("trailing-comma.safetensors", "{\"__metadata__\":{},}", 0, "the header is not JSON: ");
}

static void json_cut_short(void **state)
{
	(void)state;
	expect_bad("cut.safetensors", "{\"w\":{\"dtype\":\"F32\",", 0,
		   "the header is not JSON: it ends inside the object (byte 28)");
	/* A header length of 1 leaves only the brace. */
	expect_bad_file(write_raw("brace.safetensors", 1, "{}", 2),
			"the header is not JSON: it ends inside the object (byte 9)");
}

static void trailing_garbage_after_the_object(void **state)
{
	(void)state;
	expect_bad("trail-x.safetensors", "{}x", 0, "byte 10");
	expect_bad("trail-x.safetensors", "{}  x", 0, "byte 12");
	expect_bad("trail-obj.safetensors", "{}{}", 0, "byte 10");
	expect_bad_file(write_st_n("trail-nul.safetensors", "{}\0", 3, 0),
			"the header has more after its JSON object (byte 10)");
	expect_bad_file(write_st_n("trail-nul-sp.safetensors", "{} \0 ", 5, 0),
			"the header has more after its JSON object (byte 11)");
}

static void deep_nesting_is_refused(void **state)
{
	char header[4096];
	size_t n = 0;

	(void)state;
	n += (size_t)snprintf(header, sizeof header, "{\"w\":");
	for (int i = 0; i < 1000; i++)
		header[n++] = '[';
	for (int i = 0; i < 1000; i++)
		header[n++] = ']';
	header[n++] = '}';
	header[n] = '\0';
	expect_bad("deep.safetensors", header, 0, "the header is not JSON: ");
}

/* What json-c accepts and the reference (serde_json) does not. */

static void single_quotes_are_refused(void **state)
{
	(void)state;
	expect_bad("quote.safetensors", "{'w':{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
		   "unexpected byte 0x27 at byte 9");
}

static void nan_and_infinity_are_refused(void **state)
{
	(void)state;
	expect_bad("nan.safetensors", "{" T("w", "F32", "[NaN]", 0, 4) "}", 4,
		   "unexpected byte 0x4e at byte 37");
	expect_bad("inf.safetensors", "{" T("w", "F32", "[-Infinity]", 0, 4) "}", 4,
		   "unexpected byte 0x49 at byte 38");
}

static void control_character_in_a_string_is_refused(void **state)
{
	(void)state;
	expect_bad("ctrl.safetensors", "{" T("w\x01", "U8", "[1]", 0, 1) "}", 1,
		   "a control character in a string at byte 11");
	expect_bad("tab.safetensors", "{\"__metadata__\":{\"k\":\"a\tb\"}}", 0,
		   "a control character in a string at byte 31");
}

static void unpaired_surrogate_escape_is_refused(void **state)
{
	(void)state;
	expect_bad("lo-surrogate.safetensors", "{\"__metadata__\":{\"k\":\"\\udc00\"}}", 0,
		   "an unpaired surrogate escape at byte 30");
	expect_bad("hi-surrogate.safetensors", "{\"__metadata__\":{\"k\":\"x\\ud83dy\"}}", 0,
		   "an unpaired surrogate escape at byte 31");
	expect_bad("hi-hi.safetensors", "{" T("\\ud83d\\ud83d", "U8", "[1]", 0, 1) "}", 1,
		   "an unpaired surrogate escape at byte 10");
}

/* json-c would clamp it to 2^64 - 1, and with the 0 beside it the
 * shape would hold no bytes. */
static void integer_past_2_64_is_refused(void **state)
{
	(void)state;
	expect_bad("big.safetensors", "{" T("w", "U8", "[18446744073709551616,0]", 0, 0) "}", 0,
		   "the number at byte 36 is larger than 2^64 - 1");
	expect_bad("big2.safetensors", "{" T("w", "U8", "[0,99999999999999999999999]", 0, 0) "}", 0,
		   "the number at byte 38 is larger than 2^64 - 1");
}

static void nul_in_a_key_is_refused(void **state)
{
	(void)state;
	expect_bad("nul-key.safetensors", "{" T("a\\u0000b", "U8", "[1]", 0, 1) "}", 1,
		   "the key at byte 9 holds a NUL character");
}

/* ---- __metadata__ ------------------------------------------------------------------------- */

static void metadata_not_an_object(void **state)
{
	(void)state;
	expect_bad("meta-array.safetensors", "{\"__metadata__\":[\"a\"]}", 0,
		   "__metadata__ is an array, not an object of strings");
	expect_bad("meta-string.safetensors", "{\"__metadata__\":\"a\"}", 0,
		   "__metadata__ is a string, not an object of strings");
	expect_bad("meta-null-whole.safetensors", "{\"__metadata__\":null}", 0,
		   "__metadata__ is null, not an object of strings");
}

static void metadata_value_not_a_string(void **state)
{
	(void)state;
	expect_bad("meta-int.safetensors", "{\"__metadata__\":{\"a\":\"x\",\"k\":1}}", 0,
		   "__metadata__ 'k' is an integer, not a string");
	expect_bad("meta-null.safetensors", "{\"__metadata__\":{\"n\":null}}", 0,
		   "__metadata__ 'n' is null, not a string");
	expect_bad("meta-obj.safetensors", "{\"__metadata__\":{\"o\":{}}}", 0,
		   "__metadata__ 'o' is an object, not a string");
}

/* ---- tensor entries ----------------------------------------------------------------------- */

static void tensor_entry_not_an_object(void **state)
{
	(void)state;
	expect_bad("entry-array.safetensors", "{\"w\":[0,4]}", 4,
		   "tensor 'w': the entry is an array, not an object");
	expect_bad("entry-bool.safetensors", "{\"w\":true}", 0,
		   "tensor 'w': the entry is a boolean, not an object");
}

static void tensor_missing_dtype(void **state)
{
	(void)state;
	expect_bad("no-dtype.safetensors", "{\"w\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
		   "tensor 'w': field 'dtype' is missing");
}

static void tensor_missing_shape(void **state)
{
	(void)state;
	expect_bad("no-shape.safetensors", "{\"w\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1,
		   "tensor 'w': field 'shape' is missing");
}

static void tensor_missing_data_offsets(void **state)
{
	(void)state;
	expect_bad("no-offsets.safetensors", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1,
		   "tensor 'w': field 'data_offsets' is missing");
}

static void tensor_unknown_field(void **state)
{
	(void)state;
	expect_bad("extra.safetensors",
		   "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"extra\":1}}", 1,
		   "tensor 'w': unknown field 'extra'");
}

static void unknown_dtype(void **state)
{
	(void)state;
	expect_bad("f128.safetensors", "{" T("w", "F128", "[1]", 0, 16) "}", 16,
		   "tensor 'w': dtype 'F128' is not one of F64, F32");
	expect_bad("lower.safetensors", "{" T("w", "f32", "[1]", 0, 4) "}", 4,
		   "tensor 'w': dtype 'f32' is not one of");
	/* Not "F32" followed by a NUL, and not shown as "F32": the whole
	 * dtype as the header writes it. */
	expect_bad("nul-dtype.safetensors", "{" T("w", "F32\\u0000", "[1]", 0, 4) "}", 4,
		   "tensor 'w': dtype 'F32\\u0000' is not one of");
	expect_bad("nul-dtype-u8.safetensors", "{" T("w", "U8\\u0000x", "[1]", 0, 1) "}", 1,
		   "tensor 'w': dtype 'U8\\u0000x' is not one of");
}

static void dtype_not_a_string(void **state)
{
	(void)state;
	expect_bad("dtype-int.safetensors", "{\"w\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
		   "tensor 'w': dtype is an integer, not a string");
}

static void shape_not_an_array(void **state)
{
	(void)state;
	expect_bad("shape-int.safetensors", "{" T("w", "U8", "4", 0, 4) "}", 4,
		   "tensor 'w': shape is an integer, not an array");
}

static void shape_negative_entry(void **state)
{
	(void)state;
	expect_bad("shape-neg.safetensors", "{" T("w", "U8", "[2,-1]", 0, 0) "}", 0,
		   "tensor 'w': shape[1] is -1, not a non-negative integer");
}

static void shape_non_integer_entry(void **state)
{
	(void)state;
	expect_bad("shape-frac.safetensors", "{" T("w", "U8", "[1.5]", 0, 1) "}", 1,
		   "tensor 'w': shape[0] is 1.5, not a non-negative integer");
	expect_bad("shape-float.safetensors", "{" T("w", "U8", "[1.0]", 0, 1) "}", 1,
		   "tensor 'w': shape[0] is 1.0, not a non-negative integer");
	expect_bad("shape-str.safetensors", "{" T("w", "U8", "[\"1\"]", 0, 1) "}", 1,
		   "tensor 'w': shape[0] is \"1\", not a non-negative integer");
	expect_bad("shape-null.safetensors", "{" T("w", "U8", "[null]", 0, 1) "}", 1,
		   "tensor 'w': shape[0] is null, not a non-negative integer");
}

static void rank_above_16(void **state)
{
	(void)state;
	expect_bad("rank17.safetensors",
		   "{" T("deep", "U8", "[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]", 0, 1) "}", 1,
		   "tensor 'deep': shape has 17 dimensions, more than 16");
}

static void shape_element_count_overflows(void **state)
{
	(void)state;
	expect_bad("elements.safetensors", "{" T("w", "U8", "[4294967296,4294967296]", 0, 0) "}", 0,
		   "tensor 'w': shape [4294967296, 4294967296] has more than 2^64 - 1 elements");
}

static void byte_size_overflows(void **state)
{
	(void)state;
	/* 2^61 elements fit; their 2^67 bits do not. */
	expect_bad("bytes.safetensors", "{" T("w", "F64", "[2305843009213693952]", 0, 0) "}", 0,
		   "tensor 'w': shape [2305843009213693952] of F64 is too large");
}

static void size_differs_from_data_offsets(void **state)
{
	(void)state;
	expect_bad("mismatch.safetensors", "{" T("w", "F32", "[2,3]", 0, 20) "}", 20,
		   "tensor 'w': shape [2, 3] has 24 bytes of F32 but data_offsets [0, 20] hold 20");
	expect_bad("mismatch-scalar.safetensors", "{" T("s", "F32", "[]", 0, 0) "}", 0,
		   "tensor 's': shape [] has 4 bytes of F32 but data_offsets [0, 0] hold 0");
}

static void packed_dtype_must_fill_whole_bytes(void **state)
{
	(void)state;
	expect_bad("f4-odd.safetensors", "{" T("w", "F4", "[3]", 0, 1) "}", 1,
		   "tensor 'w': shape [3] has 3 elements of F4 (4 bits each), which do not fill whole bytes");
	expect_bad("f6.safetensors", "{" T("w", "F6_E2M3", "[2,3]", 0, 4) "}", 4,
		   "tensor 'w': shape [2, 3] has 6 elements of F6_E2M3 (6 bits each)");
	/* 4 F6 elements are 3 bytes. */
	devcache_model_file_t *mf = open_ok(write_st("f6-ok.safetensors", "{" T("w", "F6_E3M2", "[4]", 0, 3) "}", 3));
	devcache_model_file_close(mf);
}

static void data_offsets_not_two_entries(void **state)
{
	(void)state;
	expect_bad("offsets1.safetensors", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1]}}", 1,
		   "tensor 'w': data_offsets [1] is not [begin, end]");
	expect_bad("offsets3.safetensors", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", 2,
		   "tensor 'w': data_offsets [0,1,2] is not [begin, end]");
	expect_bad("offsets-obj.safetensors", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":{}}}", 1,
		   "tensor 'w': data_offsets is an object, not an array");
}

static void data_offsets_negative_entry(void **state)
{
	(void)state;
	expect_bad("offsets-neg.safetensors", "{" T("w", "U8", "[0]", -4, 0) "}", 0,
		   "tensor 'w': data_offsets[0] is -4, not a non-negative integer");
	expect_bad("offsets-frac.safetensors", "{" T("w", "U8", "[1]", 0, 1.0) "}", 1,
		   "tensor 'w': data_offsets[1] is 1.0, not a non-negative integer");
}

static void data_offsets_end_before_begin(void **state)
{
	(void)state;
	expect_bad("backwards.safetensors", "{" T("w", "U8", "[4]", 4, 0) "}", 4,
		   "tensor 'w': data_offsets [4, 0] end before they begin");
}

/* ---- the data section --------------------------------------------------------------------- */

static void gap_between_tensors(void **state)
{
	(void)state;
	expect_bad("gap.safetensors", "{" T("a", "F32", "[1]", 0, 4) "," T("b", "F32", "[1]", 8, 12) "}", 12,
		   "tensor 'b': data_offsets [8, 12] leave a gap after tensor 'a', which ends at 4");
}

static void overlapping_tensors(void **state)
{
	(void)state;
	expect_bad("overlap.safetensors", "{" T("a", "F32", "[2]", 0, 8) "," T("b", "F32", "[2]", 4, 12) "}", 12,
		   "tensor 'b': data_offsets [4, 12] overlap tensor 'a', which ends at 8");
	/* The same range twice. */
	expect_bad("same.safetensors", "{" T("a", "F32", "[1]", 0, 4) "," T("b", "F32", "[1]", 0, 4) "}", 4,
		   "tensor 'b': data_offsets [0, 4] overlap tensor 'a', which ends at 4");
	/* A zero-sized tensor inside another one. */
	expect_bad("inside.safetensors", "{" T("a", "F32", "[2]", 0, 8) "," T("z", "F32", "[0]", 4, 4) "}", 8,
		   "tensor 'z': data_offsets [4, 4] overlap tensor 'a', which ends at 8");
}

static void first_tensor_not_at_zero(void **state)
{
	(void)state;
	expect_bad("first.safetensors", "{" T("a", "F32", "[1]", 4, 8) "}", 8,
		   "tensor 'a': data_offsets [4, 8] begin after 0");
}

static void file_longer_than_the_last_tensor(void **state)
{
	(void)state;
	expect_bad("longer.safetensors", "{" T("a", "F32", "[1]", 0, 4) "," T("b", "U8", "[0]", 4, 4) "}", 6,
		   "tensor 'b' ends at byte 4 of the data section, but 2 more bytes follow it");
}

static void file_shorter_than_the_last_tensor(void **state)
{
	(void)state;
	expect_bad("shorter.safetensors", "{" T("a", "F32", "[2]", 0, 8) "}", 4,
		   "tensor 'a': data_offsets [0, 8] run past the end of the file (the data section holds 4 bytes)");
	/* An end near 2^64 must not wrap around into the file. */
	expect_bad("wrap.safetensors",
		   "{" T("a", "U8", "[1]", 18446744073709551615, 18446744073709551615) "}", 4,
		   "tensor 'a': data_offsets [18446744073709551615, 18446744073709551615] run past the end");
}

static void no_tensors_but_data(void **state)
{
	(void)state;
	expect_bad("data-only.safetensors", "{}", 4, "the header lists no tensors, but 4 bytes of data follow it");
	expect_bad("meta-data.safetensors", "{\"__metadata__\":{\"a\":\"b\"}}", 1,
		   "the header lists no tensors, but 1 bytes of data follow it");
}

/* ---- keys given twice --------------------------------------------------------------------- */

static void duplicate_tensor_name(void **state)
{
	(void)state;
	expect_bad("dup.safetensors", "{" T("w", "U8", "[1]", 0, 1) "," T("w", "U8", "[1]", 1, 2) "}", 2,
		   "the header gives 'w' twice (bytes 9 and 61)");
}

static void duplicate_tensor_name_escaped(void **state)
{
	(void)state;
	expect_bad("dup-esc.safetensors", "{" T("a", "U8", "[1]", 0, 1) "," T("\\u0061", "U8", "[1]", 1, 2) "}", 2,
		   "the header gives 'a' twice (bytes 9 and 61)");
	expect_bad("dup-esc2.safetensors",
		   "{" T("\\u00e9", "U8", "[1]", 0, 1) "," T("\xc3\xa9", "U8", "[1]", 1, 2) "}", 2,
		   "the header gives '\xc3\xa9' twice");
	expect_bad("dup-esc3.safetensors",
		   "{" T("a/b", "U8", "[1]", 0, 1) "," T("a\\/b", "U8", "[1]", 1, 2) "}", 2,
		   "the header gives 'a/b' twice");
}

static void duplicate_metadata(void **state)
{
	(void)state;
	expect_bad("dup-meta.safetensors", "{\"__metadata__\":{},\"__metadata__\":{}}", 0,
		   "the header gives '__metadata__' twice");
	expect_bad("dup-meta-key.safetensors", "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0,
		   "__metadata__ gives 'k' twice (bytes 25 and 33)");
}

static void duplicate_field_in_a_tensor(void **state)
{
	(void)state;
	expect_bad("dup-field.safetensors",
		   "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1,
		   "tensor 'w': field 'dtype' is given twice");
}

/* ---- limits and robustness ------------------------------------------------------------------ */

static void name_longer_than_the_limit(void **state)
{
	size_t n = 65536;
	char *header = malloc(n + 128);

	(void)state;
	assert_non_null(header);
	header[0] = '{';
	header[1] = '"';
	memset(header + 2, 'x', n);
	strcpy(header + 2 + n, "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}");
	expect_bad("long-name.safetensors", header, 1, "the name is longer than 65535 bytes");
	free(header);
}


/* ---- memory in proportion to the header --------------------------------------------------- */

/* At most 64 MiB and 8 bytes a byte of header: json-c's tree of the
 * header took 260 bytes a byte of "{}" (2.6 GB for 10 MB). */
static void expect_memory_in_proportion(const char *path, size_t hlen, int want_rc)
{
	uint64_t extra, bound = ((uint64_t)64 << 20) + 8 * (uint64_t)hlen;
	int rc = mw_open_in_child(path, 0, &extra, NULL, 0);

	if (TEST_TSAN) /* its shadow memory, not ours */
		print_message("# ThreadSanitizer build: %llu MiB beyond the start, not bounded\n",
			      (unsigned long long)(extra >> 20));
	if (rc != want_rc || (!TEST_TSAN && extra > bound))
		fail_msg("%s: %d (not %d), %llu MiB beyond the start, more than %llu MiB?", path, rc,
			 want_rc, (unsigned long long)(extra >> 20), (unsigned long long)(bound >> 20));
}

/* A header of about n bytes: open, then pre, a counter (to keep keys
 * distinct, when counted) and post again and again, then close. */
static char *repeated(size_t n, const char *open, const char *pre, bool counted, const char *post,
		      const char *close, size_t *len_p)
{
	char *h = malloc(n + 64);
	size_t len = 0;

	assert_non_null(h);
	len += (size_t)sprintf(h, "%s", open);
	for (unsigned i = 0; len + strlen(close) + 40 < n; i++)
		len += counted ? (size_t)sprintf(h + len, "%s%u%s", pre, i, post)
			       : (size_t)sprintf(h + len, "%s%s", pre, post);
	len -= h[len - 1] == ','; /* no comma before the close */
	len += (size_t)sprintf(h + len, "%s", close);
	*len_p = len;
	return h;
}

static void ten_mb_of_empty_objects_take_memory_in_proportion(void **state)
{
	size_t len;
	char *h;

	(void)state;
	/* Distinct keys, each an empty entry: the scan keeps every key. */
	h = repeated(10 << 20, "{", "\"k", true, "\":{},", "}", &len);
	expect_memory_in_proportion(write_st_n("braces.safetensors", h, len, 0), len,
				    DEVCACHE_EFORMAT);
	expect_bad_file(path_of("braces.safetensors"), "tensor 'k0': field 'dtype' is missing");
	free(h);
	/* One entry of empty arrays and objects. */
	h = repeated(10 << 20, "{\"w\":[", "[],{},", false, "", "]}", &len);
	expect_memory_in_proportion(write_st_n("arrays.safetensors", h, len, 0), len,
				    DEVCACHE_EFORMAT);
	expect_bad_file(path_of("arrays.safetensors"), "tensor 'w': the entry is an array");
	free(h);
}

static void many_tensors_take_memory_in_proportion(void **state)
{
	const unsigned n = 100000;
	char *h = malloc((size_t)n * 100 + 16);
	size_t len = 0;

	(void)state;
	assert_non_null(h);
	h[len++] = '{';
	for (unsigned i = 0; i < n; i++)
		len += (size_t)sprintf(h + len, "%s\"model.layers.%u.weight\":{\"dtype\":\"U8\","
					"\"shape\":[1],\"data_offsets\":[%u,%u]}",
				       i ? "," : "", i, i, i + 1);
	h[len++] = '}';
	const char *path = write_st_n("many.safetensors", h, len, n);
	expect_memory_in_proportion(path, len, 0);
	devcache_model_file_t *mf = open_ok(path);
	devcache_tensor_info_t t;
	assert_int_equal(devcache_model_file_tensor_count(mf), n);
	assert_int_equal(devcache_model_file_find(mf, "model.layers.99999.weight", &t), 0);
	assert_int_equal(t.offset, devcache_model_file_data_offset(mf) + 99999);
	devcache_model_file_close(mf);
	free(h);
}

/* More keys than a header may have tensors stop the scan there. */
static void more_keys_than_tensors_are_refused(void **state)
{
	size_t len;
	char *h;

	(void)state;
	h = repeated(14 << 20, "{", "\"", true, "\":0,", "}", &len);
	expect_bad_file(write_st_n("keys.safetensors", h, len, 0), "more than 1048576 tensors");
	free(h);
}

/* Every byte of a valid file changed in turn to each of a few telling
 * values, and every length it could be cut to: the reader answers each
 * with success or a malformed-file error, never anything worse. */
static void every_one_byte_change_is_handled(void **state)
{
	static const char header[] = "{\"__metadata__\":{\"k\":\"v\\u00e9\"}," T("a", "F16", "[2]", 0, 4) ","
				     T("b", "F4", "[2,2]", 4, 6) "}  ";
	static const unsigned char values[] = {0x00, '"', '\\', '{', '}', '[', ']', ',', ':',
					       '0', '9', '-', 'u', ' ', 0x80, 0xc3, 0xff};
	const size_t hlen = sizeof header - 1, len = hlen + 6;
	unsigned char body[256];
	devcache_model_file_t *mf;

	(void)state;
	memcpy(body, header, hlen);
	memset(body + hlen, 0x5a, 6);
	mf = open_ok(write_raw("fuzz-base.safetensors", hlen, body, len));
	devcache_model_file_close(mf);
	for (size_t i = 0; i < len; i++) {
		for (size_t v = 0; v < sizeof values; v++) {
			unsigned char saved = body[i];
			const char *path;
			int rc;

			body[i] = values[v];
			path = write_raw("fuzz.safetensors", hlen, body, len);
			mf = NULL;
			rc = devcache_model_file_open(path, &mf);
			if (rc != 0 && rc != DEVCACHE_EFORMAT)
				fail_msg("byte %zu = 0x%02x: %d %s", i, values[v], rc, devcache_last_error());
			if (rc)
				assert_contains(devcache_last_error(), path);
			devcache_model_file_close(mf);
			body[i] = saved;
		}
	}
	for (size_t cut = 0; cut < len; cut++) {
		const char *path = write_raw("cut.safetensors", hlen, body, cut);

		mf = NULL;
		assert_int_equal(devcache_model_file_open(path, &mf), DEVCACHE_EFORMAT);
		assert_null(mf);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_dtype_has_its_size),
		cmocka_unit_test(scalar_has_one_element),
		cmocka_unit_test(zero_sized_tensors_share_offsets),
		cmocka_unit_test(sixteen_dimensions_are_allowed),
		cmocka_unit_test(metadata_comes_in_file_order_as_json_strings),
		cmocka_unit_test(header_padding_is_part_of_the_header),
		cmocka_unit_test(empty_header_with_no_data),
		cmocka_unit_test(tensors_keep_file_order_and_are_found_by_name),
		cmocka_unit_test(escaped_names_are_decoded),
		cmocka_unit_test(shorter_than_nine_bytes_is_not_safetensors),
		cmocka_unit_test(a_fifo_is_refused_without_blocking),
		cmocka_unit_test(no_brace_at_byte_8_is_not_safetensors),
		cmocka_unit_test(header_length_over_the_limit),
		cmocka_unit_test(header_length_beyond_the_file),
		cmocka_unit_test(lying_header_length_is_refused),
		cmocka_unit_test(utf8_bad_continuation),
		cmocka_unit_test(utf8_overlong),
		cmocka_unit_test(utf8_surrogate),
		cmocka_unit_test(utf8_above_u10ffff),
		cmocka_unit_test(utf8_cut_short_by_the_end),
		cmocka_unit_test(not_json),
		cmocka_unit_test(json_cut_short),
		cmocka_unit_test(trailing_garbage_after_the_object),
		cmocka_unit_test(deep_nesting_is_refused),
		cmocka_unit_test(ten_mb_of_empty_objects_take_memory_in_proportion),
		cmocka_unit_test(many_tensors_take_memory_in_proportion),
		cmocka_unit_test(more_keys_than_tensors_are_refused),
		cmocka_unit_test(single_quotes_are_refused),
		cmocka_unit_test(nan_and_infinity_are_refused),
		cmocka_unit_test(control_character_in_a_string_is_refused),
		cmocka_unit_test(unpaired_surrogate_escape_is_refused),
		cmocka_unit_test(integer_past_2_64_is_refused),
		cmocka_unit_test(nul_in_a_key_is_refused),
		cmocka_unit_test(metadata_not_an_object),
		cmocka_unit_test(metadata_value_not_a_string),
		cmocka_unit_test(tensor_entry_not_an_object),
		cmocka_unit_test(tensor_missing_dtype),
		cmocka_unit_test(tensor_missing_shape),
		cmocka_unit_test(tensor_missing_data_offsets),
		cmocka_unit_test(tensor_unknown_field),
		cmocka_unit_test(unknown_dtype),
		cmocka_unit_test(dtype_not_a_string),
		cmocka_unit_test(shape_not_an_array),
		cmocka_unit_test(shape_negative_entry),
		cmocka_unit_test(shape_non_integer_entry),
		cmocka_unit_test(rank_above_16),
		cmocka_unit_test(shape_element_count_overflows),
		cmocka_unit_test(byte_size_overflows),
		cmocka_unit_test(size_differs_from_data_offsets),
		cmocka_unit_test(packed_dtype_must_fill_whole_bytes),
		cmocka_unit_test(data_offsets_not_two_entries),
		cmocka_unit_test(data_offsets_negative_entry),
		cmocka_unit_test(data_offsets_end_before_begin),
		cmocka_unit_test(gap_between_tensors),
		cmocka_unit_test(overlapping_tensors),
		cmocka_unit_test(first_tensor_not_at_zero),
		cmocka_unit_test(file_longer_than_the_last_tensor),
		cmocka_unit_test(file_shorter_than_the_last_tensor),
		cmocka_unit_test(no_tensors_but_data),
		cmocka_unit_test(duplicate_tensor_name),
		cmocka_unit_test(duplicate_tensor_name_escaped),
		cmocka_unit_test(duplicate_metadata),
		cmocka_unit_test(duplicate_field_in_a_tensor),
		cmocka_unit_test(name_longer_than_the_limit),
		cmocka_unit_test(every_one_byte_change_is_handled),
	};

	/* The messages are checked in English. */
	setenv("LANGUAGE", "C", 1);
	setenv("LC_ALL", "C", 1);
	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, tmpdir_setup, tmpdir_teardown);
}
