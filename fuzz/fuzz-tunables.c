/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fuzz-tunables.c - the checks the configuration fuzz targets make of every set of tunables the parser accepts. */
#include "fuzz-tunables.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void drop(void *user, enum devcache_log_level level, const char *message)
{
	(void)user;
	(void)level;
	(void)message;
}

void fuzz_log_init(struct log_state *log)
{
	log_init(log, drop, NULL);
	log_flush(log, DEVCACHE_LOG_DEBUG);
}

/* What devcache config and devcache_config_get() print must be what a
 * configuration file can say. */
void fuzz_check_tunables(const struct tunable_set *set)
{
	for (int i = 0; i < TUN_COUNT; i++) {
		char text[4096], again[4096], why[512];
		struct tunable_value v;

		tunable_format(i, &set->v[i], text, sizeof text);
		if (strlen(text) >= sizeof text - 1)
			continue; /* cut short: nothing to compare */
		if (tunable_parse(i, text, &v, why, sizeof why) != 0) {
			fprintf(stderr, "%s: '%s', as formatted, does not parse: %s\n",
				tunable_defs[i].name, text, why);
			abort();
		}
		tunable_format(i, &v, again, sizeof again);
		tunable_value_free(&v);
		if (strcmp(text, again) != 0) {
			fprintf(stderr, "%s: '%s' parses back as '%s'\n", tunable_defs[i].name, text,
				again);
			abort();
		}
	}
}
