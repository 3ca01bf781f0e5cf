/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* bytes.c - byte counts as text: the one formatter of the library and the tool. */
#include "bytes.h"

#include <inttypes.h>
#include <stdio.h>

void format_bytes(uint64_t bytes, char *buf, size_t size)
{
	static const char *const units[] = {"KiB", "MiB", "GiB", "TiB"};
	double v = (double)bytes;
	int u = -1;

	while (v >= 1024 && u < 3)
		v /= 1024, u++;
	if (u < 0)
		snprintf(buf, size, "%" PRIu64 " B", bytes);
	else
		snprintf(buf, size, "%.1f %s", v, units[u]);
}

void format_size(uint64_t bytes, char *buf, size_t size)
{
	static const char units[] = "KMGT";

	for (int u = 3; u >= 0; u--) {
		uint64_t m = 1ULL << (10 * (u + 1));

		if (bytes >= m && bytes % m == 0) {
			snprintf(buf, size, "%" PRIu64 "%c", bytes / m, units[u]);
			return;
		}
	}
	snprintf(buf, size, "%" PRIu64, bytes);
}
