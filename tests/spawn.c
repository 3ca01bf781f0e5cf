/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* spawn.c - run the devcache tool from a test and capture what it prints. */
#include "tap.h"

#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "spawn.h"

static void slurp(int fd, char *buf, size_t size)
{
	ssize_t n = pread(fd, buf, size - 1, 0);

	buf[n > 0 ? n : 0] = '\0';
	close(fd);
}

/* Run the tool with extra environment ("NAME=VALUE", or "-NAME" to unset). */
void spawn_tool(struct result *r, const char *const *env, const char *const *args)
{
	char out_path[] = "/tmp/devcache-test-outXXXXXX", err_path[] = "/tmp/devcache-test-errXXXXXX";
	int out = mkstemp(out_path), err = mkstemp(err_path), status;
	const char *argv[32] = {test_env("TEST_TOOL")};
	size_t n = 1;

	assert_true(out >= 0 && err >= 0);
	unlink(out_path);
	unlink(err_path);
	for (; args && *args && n < 31; args++)
		argv[n++] = *args;
	argv[n] = NULL;
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		for (; env && *env; env++)
			if (**env == '-')
				unsetenv(*env + 1);
			else
				putenv((char *)*env);
		dup2(out, 1);
		dup2(err, 2);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	r->status = WEXITSTATUS(status);
	slurp(out, r->out, sizeof r->out);
	slurp(err, r->err, sizeof r->err);
}
