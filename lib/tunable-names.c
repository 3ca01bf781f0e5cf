/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* tunable-names.c - tunable names: looked up, and the nearest known name suggested for a slip. */
#include "internal.h"

#include <ctype.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

int tunable_find(const char *name)
{
	for (int i = 0; i < TUN_COUNT; i++)
		if (strcmp(tunable_defs[i].name, name) == 0)
			return i;
	return -1;
}

int compat_find(const char *name)
{
	for (size_t i = 0; i < compat_count; i++)
		if (strcmp(compat_defs[i].name, name) == 0)
			return (int)i;
	return -1;
}

/* Case-insensitive edit distance, capped: enough to catch typos. */
#define NAME_DISTANCE_CAP 3u
size_t name_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	size_t row[64];

	/* Each insertion or deletion costs one. */
	if (la >= 63 || lb >= 63 || la > lb + NAME_DISTANCE_CAP || lb > la + NAME_DISTANCE_CAP)
		return SIZE_MAX;
	for (size_t j = 0; j <= lb; j++)
		row[j] = j;
	for (size_t i = 1; i <= la; i++) {
		size_t diag = row[0], row_min = i;

		row[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t up = row[j];
			size_t cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
			size_t best = diag + cost;

			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			if (up + 1 < best)
				best = up + 1;
			row[j] = best;
			diag = up;
			if (best < row_min)
				row_min = best;
		}
		/* No later row goes below this one's minimum: a name far from
		 * every other costs a few rows, not the whole table. */
		if (row_min > NAME_DISTANCE_CAP)
			return SIZE_MAX;
	}
	return row[lb];
}

/* Whether name abbreviates cand word by word ("max_split_sz" for
 * max_split_size_mb, "gc_thresh" for no tunable, "exp_seg" for
 * expandable_segments): each of its words, separated by '_', begins the
 * word of cand in the same place and has its other letters in that word,
 * in order; cand may have more words. */
static bool abbreviates(const char *name, const char *cand)
{
	if (strlen(name) < 4)
		return false;
	while (*name) {
		size_t nw = strcspn(name, "_"), cw = strcspn(cand, "_"), j = 0;

		if (nw == 0 || cw == 0 || tolower((unsigned char)name[0]) !=
						  tolower((unsigned char)cand[0]))
			return false;
		for (size_t i = 0; i < nw; i++) {
			while (j < cw && tolower((unsigned char)cand[j]) !=
					     tolower((unsigned char)name[i]))
				j++;
			if (j++ == cw)
				return false;
		}
		name += nw + (name[nw] == '_');
		cand += cw + (cand[cw] == '_');
		if (*name && !*cand)
			return false;
	}
	return true;
}

const char *tunable_suggest(const char *name)
{
	const char *best = NULL;
	size_t best_d = SIZE_MAX;

	/* PyTorch's options that are accepted and ignored are names a user
	 * writes too: a slip in one is an unknown tunable like any other. */
	for (size_t i = 0; i < TUN_COUNT + compat_count; i++) {
		const char *cand = i < TUN_COUNT ? tunable_defs[i].name : compat_defs[i - TUN_COUNT].name;
		size_t d = name_distance(name, cand);

		/* A prefix (max_split_size for max_split_size_mb) is a likely slip
		 * too, and so is an abbreviation (max_split_sz). */
		if (strlen(name) >= 4 && strncasecmp(cand, name, strlen(name)) == 0)
			d = d < 3 ? d : 3;
		else if (d > 3 && abbreviates(name, cand))
			d = 3;
		/* A PyTorch option's own name is no slip: suggest a tunable. */
		if (i >= TUN_COUNT && d == 0)
			continue;
		if (d < best_d) {
			best_d = d;
			best = cand;
		}
	}
	return best_d <= 3 && best_d * 3 <= strlen(name) + 3 ? best : NULL;
}
