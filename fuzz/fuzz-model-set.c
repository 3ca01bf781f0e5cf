/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fuzz-model-set.c - fuzz target: a folder of files (index JSON and shards, GGUF splits, pipelines) through devcache_model_file_open() and devcache_pipeline_open(). */
#include "config.h"

#include "fuzz.h"
#include "fuzz-model.h"

#include <devcache.h>

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/*
 * The input is a folder, one file after another: each file is a line with
 * its name, then its contents, and the files are separated by the line
 * "%%%%" (FUZZ_SEP below: the newline that ends a file's contents belongs
 * to the separator).  A name is one or two parts of [A-Za-z0-9._-] joined
 * by a slash ("unet/model.safetensors": a pipeline's component); any other
 * name becomes "fN".  The first file is the one opened; with an empty
 * first name, the folder itself.  The folder is then opened as a folder and
 * as a diffusers pipeline, whatever the first file was.
 * fuzz/make-set-input packs a folder this way.
 */
#define FUZZ_SEP "\n%%%%\n"
#define MAX_FILES 16
#define MAX_NAME 64

static bool good_part(const char *s, size_t n)
{
	if (n == 0 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-",
			    s[i]) || !s[i])
			return false;
	return true;
}

/* The file's name from its line, or "fN"; *sub_p: the length of its
 * folder part, 0 when it has none. */
static void file_name(const uint8_t *line, size_t len, unsigned k, char *name, size_t *sub_p)
{
	const char *s = (const char *)line;
	const char *slash = memchr(s, '/', len);
	size_t a = slash ? (size_t)(slash - s) : len;

	*sub_p = 0;
	if (len < MAX_NAME && good_part(s, a) && (!slash || good_part(slash + 1, len - a - 1))) {
		memcpy(name, s, len);
		name[len] = '\0';
		*sub_p = slash ? a : 0;
	} else {
		snprintf(name, MAX_NAME, "f%u", k);
	}
}

static void open_model(const char *path)
{
	devcache_model_file_t *mf;

	if (devcache_model_file_open(path, &mf) == 0) {
		fuzz_check_model_file(mf);
		devcache_model_file_close(mf);
	}
}

static void open_pipeline(const char *dir)
{
	devcache_pipeline_t *pl;

	if (devcache_pipeline_open(dir, &pl) == 0) {
		for (size_t i = 0, n = devcache_pipeline_component_count(pl); i < n; i++) {
			devcache_component_t c;

			if (devcache_pipeline_component(pl, i, &c) == 0 && c.shards)
				open_model(c.path);
		}
		devcache_pipeline_close(pl);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char dir[4096], first[4096 + MAX_NAME + 2] = "", path[sizeof first];
	const uint8_t *p = data, *end = data + size;

	if (size > FUZZ_MAX_INPUT)
		return -1;
	snprintf(dir, sizeof dir, "%s", fuzz_path("set"));
	fuzz_remove_tree(dir);
	if (mkdir(dir, 0700) != 0)
		return 0;
	for (unsigned k = 0; k < MAX_FILES && p < end; k++) {
		const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));
		const uint8_t *body = nl ? nl + 1 : end;
		const uint8_t *stop = memmem(body, (size_t)(end - body), FUZZ_SEP, strlen(FUZZ_SEP));
		char name[MAX_NAME];
		size_t sub;

		if (!stop)
			stop = end;
		file_name(p, (size_t)((nl ? nl : end) - p), k, name, &sub);
		if (sub) {
			snprintf(path, sizeof path, "%s/%.*s", dir, (int)sub, name);
			mkdir(path, 0700);
		}
		snprintf(path, sizeof path, "%s/%s", dir, name);
		fuzz_write(path, body, (size_t)(stop - body));
		if (k == 0)
			snprintf(first, sizeof first, "%s", nl == p ? dir : path);
		p = stop == end ? end : stop + strlen(FUZZ_SEP);
	}
	if (first[0])
		open_model(first);
	if (strcmp(first, dir) != 0)
		open_model(dir);
	open_pipeline(dir);
	fuzz_remove_tree(dir);
	return 0;
}
