/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* badtunable.c - a test backend that declares a tunable under another module's name. */
#include <devcache-backend.h>

static const struct devcache_backend_tunable bad_tunables[] = {
	{.name = "badtunable_ok", .type = "bool", .default_value = "true", .range = "",
	 .summary = "Fine", .description = "Declared correctly."},
	{.name = "good_depth", .type = "int", .default_value = "1", .range = "",
	 .summary = "Not its own", .description = "Named after another module."},
	{.name = NULL},
};

#define FAKE_NAME "badtunable"
#define FAKE_TUNABLES bad_tunables
#include "fake.h"
