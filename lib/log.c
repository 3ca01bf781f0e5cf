/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* log.c - the log handler: levels, the default stderr handler, and deferral while a context opens. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *log_level_name(enum devcache_log_level level)
{
	switch (level) {
	case DEVCACHE_LOG_ERROR:
		return _("error");
	case DEVCACHE_LOG_WARNING:
		return _("warning");
	case DEVCACHE_LOG_INFO:
		return _("info");
	case DEVCACHE_LOG_DEBUG:
		return _("debug");
	default:
		return "";
	}
}

void log_default_handler(void *user, enum devcache_log_level level, const char *msg)
{
	(void)user;
	fprintf(stderr, "libdevcache: %s: %s\n", log_level_name(level), msg);
}

void log_init(struct log_state *log, devcache_log_fn fn, void *user)
{
	memset(log, 0, sizeof *log);
	pthread_mutex_init(&log->lock, NULL);
	log->fn = fn ? fn : log_default_handler;
	log->user = user;
	log->level = DEVCACHE_LOG_WARNING;
	log->deferring = true;
}

void log_destroy(struct log_state *log)
{
	for (size_t i = 0; i < log->queued; i++)
		free(log->queue[i].text);
	free(log->queue);
	pthread_mutex_destroy(&log->lock);
}

/* While the context opens, log_level is not known yet: keep every message
 * until it is.  A message that cannot be queued is passed on at once rather
 * than lost. */
static bool defer(struct log_state *log, enum devcache_log_level level, const char *text)
{
	if (log->queued == log->queue_cap) {
		size_t cap = log->queue_cap ? 2 * log->queue_cap : 8;
		struct log_entry *q = realloc(log->queue, cap * sizeof *q);

		if (!q)
			return false;
		log->queue = q;
		log->queue_cap = cap;
	}
	char *copy = strdup(text);

	if (!copy)
		return false;
	log->queue[log->queued++] = (struct log_entry){level, copy};
	return true;
}

void log_msgv(struct log_state *log, enum devcache_log_level level, const char *fmt, va_list ap)
{
	char text[2048];

	/* Cheap early exit without the lock: debug messages on busy paths. */
	if (!__atomic_load_n(&log->deferring, __ATOMIC_ACQUIRE) &&
	    (int)level > __atomic_load_n(&log->level, __ATOMIC_RELAXED))
		return;
	msg_vformat(text, sizeof text, fmt, ap); /* names from input shown safely */
	pthread_mutex_lock(&log->lock);
	if (!log->deferring || !defer(log, level, text))
		log->fn(log->user, level, text);
	pthread_mutex_unlock(&log->lock);
}

void log_msg(struct log_state *log, enum devcache_log_level level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_msgv(log, level, fmt, ap);
	va_end(ap);
}

void log_flush(struct log_state *log, int level)
{
	pthread_mutex_lock(&log->lock);
	__atomic_store_n(&log->level, level, __ATOMIC_RELAXED);
	__atomic_store_n(&log->deferring, false, __ATOMIC_RELEASE);
	for (size_t i = 0; i < log->queued; i++) {
		if ((int)log->queue[i].level <= level)
			log->fn(log->user, log->queue[i].level, log->queue[i].text);
		free(log->queue[i].text);
	}
	log->queued = 0;
	pthread_mutex_unlock(&log->lock);
}
