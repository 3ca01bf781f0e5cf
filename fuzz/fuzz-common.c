/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fuzz-common.c - the fuzz targets' private temp folder and file helpers. */
#include "config.h"

#include "fuzz.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[4096];

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

void fuzz_remove_tree(const char *path)
{
	nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void remove_tmpdir(void)
{
	if (tmpdir[0])
		fuzz_remove_tree(tmpdir);
}

const char *fuzz_tmpdir(void)
{
	if (!tmpdir[0]) {
		const char *base = getenv("TMPDIR");

		/* Not a disk's file system where avoidable: truncating and
		 * rewriting a file there for every input costs more than the
		 * parsing. */
		if (!base || base[0] != '/')
			base = access("/dev/shm", W_OK | X_OK) == 0 ? "/dev/shm" : "/tmp";
		snprintf(tmpdir, sizeof tmpdir, "%s/devcache-fuzz-XXXXXX", base);
		if (!mkdtemp(tmpdir)) {
			fprintf(stderr, "fuzz: cannot make %s: %s\n", tmpdir, strerror(errno));
			abort();
		}
		atexit(remove_tmpdir);
	}
	return tmpdir;
}

const char *fuzz_path(const char *name)
{
	static char path[sizeof tmpdir + 256];

	snprintf(path, sizeof path, "%s/%s", fuzz_tmpdir(), name);
	return path;
}

int fuzz_write(const char *path, const void *data, size_t size)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	const char *p = data;

	if (fd < 0 && (errno == EISDIR || errno == ENOTDIR || errno == ENOENT))
		return -1;
	if (fd < 0) {
		fprintf(stderr, "fuzz: cannot create %s: %s\n", path, strerror(errno));
		abort();
	}
	while (size) {
		ssize_t n = write(fd, p, size);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			fprintf(stderr, "fuzz: cannot write %s: %s\n", path, strerror(errno));
			abort();
		}
		p += n;
		size -= (size_t)n;
	}
	if (close(fd) != 0) {
		fprintf(stderr, "fuzz: cannot write %s: %s\n", path, strerror(errno));
		abort();
	}
	return 0;
}

char *fuzz_strndup(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);

	if (s) {
		memcpy(s, data, size);
		s[size] = '\0';
	}
	return s;
}
