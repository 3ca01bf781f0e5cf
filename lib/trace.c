/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* trace.c - writes the allocation trace of devcache-trace(5): header comments, then "+ ID SIZE [STREAM]" and "- ID" lines. */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trace.h"

/* Lines are gathered here and written with write(2) in whole lines, so a
 * program that dies leaves a trace cut at a line boundary, which replays. */
#define TRACE_BUFFER_SIZE 65536
/* The longest event line: "+ " ID ' ' SIZE ' ' STREAM '\n'. */
#define EVENT_LINE_MAX (2 + 20 + 1 + 20 + 1 + 10 + 1)

struct trace {
	pthread_mutex_t lock;
	int fd;               /* -1 once a write failed: events are dropped */
	int error;            /* errno of the first failure, 0 if none */
	bool reported;        /* the failure has been logged */
	char *path;
	struct log_state *log;
	size_t used;
	char buf[TRACE_BUFFER_SIZE];
};

/* The length of what name_template expands to (without the NUL), or -1
 * after setting the error for a '%' sequence that means nothing. */
static int expand(const char *name_template, const char *pid, const char *device_id, char *out,
		  size_t *len_p)
{
	size_t len = 0;

	for (const char *s = name_template; *s; s++) {
		const char *add = s;
		size_t n = 1;

		if (*s == '%') {
			switch (s[1]) {
			case 'p':
				add = pid, n = strlen(pid);
				break;
			case 'd':
				add = device_id, n = strlen(device_id);
				break;
			case '%':
				break;
			default:
				return err_set(DEVCACHE_ECONFIG,
					       _("trace: '%%%.1s' in '%s' is not one of %%p (the "
						 "process ID), %%d (the device) and %%%% (a '%%')"),
					       s + 1, name_template);
			}
			s++;
		}
		if (out)
			memcpy(out + len, add, n);
		len += n;
	}
	*len_p = len;
	return 0;
}

int trace_expand(const char *name_template, const char *device_id, char **path_p)
{
	char pid[24];
	size_t len;
	int rc;

	*path_p = NULL;
	snprintf(pid, sizeof pid, "%ld", (long)getpid());
	if (!name_template || !device_id)
		return err_set(DEVCACHE_EINVAL, _("trace: NULL argument"));
	if ((rc = expand(name_template, pid, device_id, NULL, &len)))
		return rc;
	if (len == 0)
		return err_set(DEVCACHE_ECONFIG, _("trace: the file name is empty"));
	if (!(*path_p = malloc(len + 1)))
		return err_set(DEVCACHE_ENOMEM, _("trace: out of memory"));
	expand(name_template, pid, device_id, *path_p, &len);
	(*path_p)[len] = '\0';
	return 0;
}

/* The write error, logged once and outside the trace's lock: the log handler
 * is the program's code. */
static void report(struct trace *trace)
{
	int error;

	pthread_mutex_lock(&trace->lock);
	error = trace->reported ? 0 : trace->error;
	trace->reported = trace->reported || error;
	pthread_mutex_unlock(&trace->lock);
	if (error)
		log_msg(trace->log, DEVCACHE_LOG_ERROR,
			_("trace %s: write error: %s; no further events are recorded"), trace->path,
			strerror(error));
}

/* Write the buffer out; on failure stop tracing.  Called with the lock held. */
static void flush_locked(struct trace *trace)
{
	size_t done = 0;

	while (trace->fd >= 0 && done < trace->used) {
		ssize_t n = write(trace->fd, trace->buf + done, trace->used - done);

		if (n > 0) {
			done += (size_t)n;
		} else if (n < 0 && errno == EINTR) {
			continue;
		} else {
			trace->error = n < 0 ? errno : ENOSPC;
			close(trace->fd);
			trace->fd = -1;
		}
	}
	trace->used = 0;
}

/* Append one line (much shorter than the buffer).  Returns whether a write
 * error is waiting to be reported. */
static bool put_line(struct trace *trace, const char *line, size_t len)
{
	bool failed;

	pthread_mutex_lock(&trace->lock);
	if (trace->fd >= 0 && TRACE_BUFFER_SIZE - trace->used < len)
		flush_locked(trace);
	if (trace->fd >= 0) {
		memcpy(trace->buf + trace->used, line, len);
		trace->used += len;
	}
	failed = trace->error && !trace->reported;
	pthread_mutex_unlock(&trace->lock);
	return failed;
}

/* Writes the decimal digits of v ending just before end; returns the start. */
static char *put_decimal(char *end, uint64_t v)
{
	do
		*--end = (char)('0' + v % 10);
	while (v /= 10);
	return end;
}

void trace_alloc(struct trace *trace, uint64_t id, size_t size, unsigned stream)
{
	char line[EVENT_LINE_MAX], *p = line + sizeof line;

	if (!trace)
		return;
	*--p = '\n';
	if (stream) {
		p = put_decimal(p, stream);
		*--p = ' ';
	}
	p = put_decimal(p, size);
	*--p = ' ';
	p = put_decimal(p, id);
	*--p = ' ';
	*--p = '+';
	if (put_line(trace, p, (size_t)(line + sizeof line - p)))
		report(trace);
}

void trace_free(struct trace *trace, uint64_t id)
{
	char line[EVENT_LINE_MAX], *p = line + sizeof line;

	if (!trace)
		return;
	*--p = '\n';
	p = put_decimal(p, id);
	*--p = ' ';
	*--p = '-';
	if (put_line(trace, p, (size_t)(line + sizeof line - p)))
		report(trace);
}

/* A comment line "# LABEL: VALUE": VALUE is cut short and its control
 * characters replaced, so it stays one line. */
static void put_comment(struct trace *trace, const char *label, const char *value)
{
	char line[EVENT_LINE_MAX + 64];
	int n = snprintf(line, sizeof line - 1, "# %s: %s", label, value);

	if (n < 0)
		return;
	if ((size_t)n > sizeof line - 2)
		n = (int)sizeof line - 2;
	for (int i = 0; i < n; i++)
		if ((unsigned char)line[i] < 0x20 || line[i] == 0x7f)
			line[i] = '?';
	line[n++] = '\n';
	if (put_line(trace, line, (size_t)n))
		report(trace);
}

void trace_add_device(struct trace *trace, const char *device_id)
{
	if (trace)
		put_comment(trace, "device", device_id);
}

/* The program's name as the kernel has it, without the newline. */
static void program_name(char *buf, size_t size)
{
	int fd = open("/proc/self/comm", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, size - 1) : -1;

	if (fd >= 0)
		close(fd);
	if (n <= 0) {
		snprintf(buf, size, "%s", program_invocation_short_name);
		return;
	}
	/* Only the kernel's newline goes: put_comment makes any other
	 * control character harmless. */
	buf[n] = '\0';
	if (buf[n - 1] == '\n')
		buf[n - 1] = '\0';
}

int trace_open(struct trace **trace_p, const char *name_template, const char *device_id,
	       uint64_t device_memory, struct log_state *log)
{
	struct trace *trace;
	char header[128], name[64], pid[24], mem[24];
	int rc;

	*trace_p = NULL;
	if (!(trace = calloc(1, sizeof *trace)))
		return err_set(DEVCACHE_ENOMEM, _("trace: out of memory"));
	if ((rc = trace_expand(name_template, device_id, &trace->path))) {
		free(trace);
		return rc;
	}
	trace->fd = open(trace->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOCTTY, 0666);
	if (trace->fd < 0) {
		rc = err_set(DEVCACHE_EIO, _("trace: cannot create %s: %s"), trace->path,
			     strerror(errno));
		free(trace->path);
		free(trace);
		return rc;
	}
	pthread_mutex_init(&trace->lock, NULL);
	trace->log = log;
	snprintf(header, sizeof header, "# libdevcache %s allocation trace\n",
		 devcache_version_string());
	memcpy(trace->buf, header, strlen(header));
	trace->used = strlen(header);
	program_name(name, sizeof name);
	put_comment(trace, "program", name);
	snprintf(pid, sizeof pid, "%ld", (long)getpid());
	put_comment(trace, "pid", pid);
	put_comment(trace, "device", device_id);
	if (device_memory) {
		snprintf(mem, sizeof mem, "%llu", (unsigned long long)device_memory);
		put_comment(trace, "device_memory", mem);
	}
	*trace_p = trace;
	return 0;
}

const char *trace_path(const struct trace *trace)
{
	return trace ? trace->path : NULL;
}

void trace_close(struct trace *trace)
{
	if (!trace)
		return;
	pthread_mutex_lock(&trace->lock);
	flush_locked(trace);
	if (trace->fd >= 0 && close(trace->fd) != 0 && errno != EINTR)
		trace->error = errno;
	trace->fd = -1;
	pthread_mutex_unlock(&trace->lock);
	report(trace);
	pthread_mutex_destroy(&trace->lock);
	free(trace->path);
	free(trace);
}
