/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* good.c - a well-formed test backend with two devices and two tunables of its own. */
#include <devcache-backend.h>

static const struct devcache_backend_tunable good_tunables[] = {
	{.name = "good_depth", .type = "int", .default_value = "2", .range = "[1,8]",
	 .summary = "How deep the good backend looks",
	 .description = "A test tunable: an integer from 1 to 8."},
	{.name = "good_flavour", .type = "enum", .default_value = "plain",
	 .range = "plain|spicy", .summary = "The good backend's flavour",
	 .description = "A test tunable: one of two names."},
	{.name = NULL},
};

#define FAKE_NAME "good"
#define FAKE_PRIORITY 50
/* Built for ABI minor 1, which had no dlpack_device_type: the core does
 * not read the one set here. */
#define FAKE_MINOR 1
#define FAKE_DLPACK 2
#define FAKE_TUNABLES good_tunables
#define FAKE_SHOW_TUNABLE "good_depth"
#include "fake.h"
