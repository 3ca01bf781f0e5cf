/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* replay.c - runs a fuzz target on every file of its corpus, under any compiler, and says so in TAP: make check's replay of the seeds and of past findings. */
#include "config.h"

#include "fuzz.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/*
 * fuzz/replay-TARGET [FILE|DIR]...  runs TARGET's LLVMFuzzerTestOneInput
 * on each file named, and on each file of each folder named (sorted by
 * name); with no argument, on its corpus in the source tree.  Each input
 * runs in a child process, so that a crash fails that input and the others
 * still run (FUZZ_REPLAY_NOFORK=1 runs them in this process, for a
 * debugger).  One TAP line: ok when every input returned.
 */

struct inputs {
	char **paths;
	size_t n, cap;
};

static int add(struct inputs *in, const char *dir, const char *name)
{
	char *p;

	if (in->n == in->cap) {
		size_t cap = in->cap ? 2 * in->cap : 256;
		char **grown = realloc(in->paths, cap * sizeof *grown);

		if (!grown)
			return -1;
		in->paths = grown;
		in->cap = cap;
	}
	if (dir ? asprintf(&p, "%s/%s", dir, name) < 0 : !(p = strdup(name)))
		return -1;
	in->paths[in->n++] = p;
	return 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A file, or the files of a folder (not its dot files or subfolders). */
static int collect(struct inputs *in, const char *arg)
{
	struct stat st;
	struct dirent *e;
	size_t first = in->n;
	DIR *d;

	if (stat(arg, &st) != 0) {
		printf("Bail out! %s: %s\n", arg, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode))
		return add(in, NULL, arg);
	if (!(d = opendir(arg))) {
		printf("Bail out! %s: %s\n", arg, strerror(errno));
		return -1;
	}
	while ((e = readdir(d))) {
		char *p;

		if (e->d_name[0] == '.' || asprintf(&p, "%s/%s", arg, e->d_name) < 0)
			continue;
		if (stat(p, &st) == 0 && S_ISREG(st.st_mode) && add(in, arg, e->d_name) != 0) {
			free(p);
			closedir(d);
			return -1;
		}
		free(p);
	}
	closedir(d);
	qsort(in->paths + first, in->n - first, sizeof *in->paths, by_name);
	return 0;
}

static unsigned char *slurp(const char *path, size_t *size_p)
{
	FILE *f = fopen(path, "rb");
	unsigned char *buf = NULL;
	size_t len = 0, cap = 0, n;

	if (!f)
		return NULL;
	do {
		if (cap - len < 65536) {
			unsigned char *grown = realloc(buf, cap = cap ? 2 * cap : 65536);

			if (!grown) {
				free(buf);
				fclose(f);
				return NULL;
			}
			buf = grown;
		}
		len += n = fread(buf + len, 1, cap - len, f);
	} while (n > 0);
	fclose(f);
	*size_p = len;
	return buf;
}

static int run_one(const char *path)
{
	size_t size;
	unsigned char *data = slurp(path, &size);

	if (!data) {
		fprintf(stderr, "%s: cannot read: %s\n", path, strerror(errno));
		return 1;
	}
	LLVMFuzzerTestOneInput(data, size);
	free(data);
	return 0;
}

/* 0, or a line saying how the input failed. */
static int run_forked(const char *path, char *why, size_t why_size)
{
	int status;
	pid_t pid;

	fflush(NULL);
	if ((pid = fork()) < 0) {
		snprintf(why, why_size, "fork: %s", strerror(errno));
		return -1;
	}
	if (pid == 0)
		exit(run_one(path));
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR) {
			snprintf(why, why_size, "waitpid: %s", strerror(errno));
			return -1;
		}
	if (WIFSIGNALED(status))
		snprintf(why, why_size, "killed by signal %d (%s)", WTERMSIG(status),
			 strsignal(WTERMSIG(status)));
	else if (WEXITSTATUS(status) != 0)
		snprintf(why, why_size, "exit status %d", WEXITSTATUS(status));
	else
		return 0;
	return -1;
}

int main(int argc, char **argv)
{
	struct inputs in = {0};
	const char *nofork = getenv("FUZZ_REPLAY_NOFORK");
	size_t failed = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("1..1\n");
	if (argc < 2 ? collect(&in, FUZZ_CORPUS) != 0 : 0)
		return 1;
	for (int i = 1; i < argc; i++)
		if (collect(&in, argv[i]) != 0)
			return 1;
	for (size_t i = 0; i < in.n; i++) {
		char why[256];

		if (nofork && *nofork) {
			if (run_one(in.paths[i]) != 0)
				failed++;
		} else if (run_forked(in.paths[i], why, sizeof why) != 0) {
			printf("# %s: %s\n", in.paths[i], why);
			failed++;
		}
	}
	if (failed)
		printf("not ok 1 - %s: %zu of %zu inputs failed\n", FUZZ_TARGET, failed, in.n);
	else if (in.n == 0)
		printf("not ok 1 - %s: no input to replay\n", FUZZ_TARGET);
	else
		printf("ok 1 - %s: %zu inputs\n", FUZZ_TARGET, in.n);
	for (size_t i = 0; i < in.n; i++)
		free(in.paths[i]);
	free(in.paths);
	return 0;
}
