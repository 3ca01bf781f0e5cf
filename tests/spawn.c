/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* spawn.c - run the devcache tool from a test and capture what it prints. */
#include "config.h"

#include "tap.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "spawn.h"

static void slurp(int fd, char *buf, size_t size)
{
	ssize_t n = pread(fd, buf, size - 1, 0);

	buf[n > 0 ? n : 0] = '\0';
	close(fd);
}

static void run(struct result *r, const char *const *env, const char *const *args, bool tty)
{
	char out_path[] = "/tmp/devcache-test-outXXXXXX", err_path[] = "/tmp/devcache-test-errXXXXXX";
	int out = mkstemp(out_path), err = mkstemp(err_path), status, pty = -1;
	const char *slave = NULL;
	const char *argv[32] = {test_env("TEST_TOOL")};
	size_t n = 1;

	assert_true(out >= 0 && err >= 0);
	unlink(out_path);
	unlink(err_path);
	for (; args && *args && n < 31; args++)
		argv[n++] = *args;
	argv[n] = NULL;
	if (tty) {
		struct winsize ws = {.ws_row = 24, .ws_col = 80};

		pty = posix_openpt(O_RDWR | O_NOCTTY);
		assert_true(pty >= 0);
		assert_int_equal(grantpt(pty), 0);
		assert_int_equal(unlockpt(pty), 0);
		assert_non_null(slave = ptsname(pty));
		assert_int_equal(ioctl(pty, TIOCSWINSZ, &ws), 0);
	}
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
		if (tty) {
			/* A session of its own, the terminal its controlling one;
			 * the terminal writes what it is given, as it is. */
			struct termios t;
			int fd;

			close(pty);
			if (setsid() < 0 || (fd = open(slave, O_RDWR)) < 0 || tcgetattr(fd, &t))
				_exit(126);
			cfmakeraw(&t);
			tcsetattr(fd, TCSANOW, &t);
			dup2(fd, 2);
			close(fd);
		}
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	if (tty) {
		/* Until the child's end of the terminal closes (EIO). */
		size_t len = 0;
		ssize_t got;

		while (len + 1 < sizeof r->err &&
		       ((got = read(pty, r->err + len, sizeof r->err - 1 - len)) > 0 ||
			(got < 0 && errno == EINTR)))
			len += got > 0 ? (size_t)got : 0;
		r->err[len] = '\0';
		close(pty);
		close(err);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	r->status = WEXITSTATUS(status);
	slurp(out, r->out, sizeof r->out);
	if (!tty)
		slurp(err, r->err, sizeof r->err);
}

/* Run the tool with extra environment ("NAME=VALUE", or "-NAME" to unset). */
void spawn_tool(struct result *r, const char *const *env, const char *const *args)
{
	run(r, env, args, false);
}

void spawn_tool_on_tty(struct result *r, const char *const *env, const char *const *args)
{
	run(r, env, args, true);
}

const char *spawn_file(const char *dir, const char *name, const char *text)
{
	static char path[8][256];
	static int next;
	char *p = path[next++ % 8];
	FILE *f;

	snprintf(p, sizeof path[0], "%s/%s", dir, name);
	assert_non_null(f = fopen(p, "w"));
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
	return p;
}
