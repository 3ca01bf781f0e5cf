/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* tunable-lists.c - list values: items split and trimmed, roundup_power2_divisions's intervals, backend names. */
#include "internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- lists ---------------------------------------------------------------- */

char *trim_dup(const char *s, size_t len)
{
	while (len && isspace((unsigned char)*s))
		s++, len--;
	while (len && isspace((unsigned char)s[len - 1]))
		len--;
	return strndup(s, len);
}

/* Split "a,b" or "[a,b]" into trimmed items. */
static int split_list(const char *text, char ***items_p, size_t *n_p, bool *bracketed_p,
		      char *why, size_t why_size)
{
	const char *s = skip_space(text);
	size_t len = strlen(s);
	char **items = NULL;
	size_t n = 0;
	int rc = DEVCACHE_ECONFIG;

	while (len && isspace((unsigned char)s[len - 1]))
		len--;
	*bracketed_p = len && s[0] == '[';
	if (*bracketed_p) {
		if (s[len - 1] != ']') {
			snprintf(why, why_size, _("'%s' has no closing ']'"), text);
			return DEVCACHE_ECONFIG;
		}
		s++, len -= 2;
	}
	/* Counted first, so that a long list is allocated once. */
	size_t count = 1;
	for (size_t i = 0; i < len; i++)
		count += s[i] == ',';
	if (!(items = malloc(count * sizeof *items))) {
		snprintf(why, why_size, _("out of memory"));
		return DEVCACHE_ENOMEM;
	}
	for (size_t start = 0, i = 0; i <= len; i++) {
		if (i < len && s[i] != ',')
			continue;
		char *item = trim_dup(s + start, i - start);

		if (!item) {
			snprintf(why, why_size, _("out of memory"));
			rc = DEVCACHE_ENOMEM;
			goto fail;
		}
		items[n++] = item;
		if (!*item) {
			snprintf(why, why_size, _("empty item in list '%s'"), text);
			goto fail;
		}
		start = i + 1;
	}
	*items_p = items;
	*n_p = n;
	return 0;
fail:
	for (size_t i = 0; i < n; i++)
		free(items[i]);
	free(items);
	return rc;
}

static bool is_pow2(unsigned long long v)
{
	return v && !(v & (v - 1));
}

static int log2_floor(unsigned long long v)
{
	return 63 - __builtin_clzll(v);
}

static int parse_count(const char *s, unsigned long long *out)
{
	char *end;

	if (!isdigit((unsigned char)*s))
		return -1;
	errno = 0;
	*out = strtoull(s, &end, 10);
	return errno || *end ? -1 : 0;
}

/* PyTorch's roundup_power2_divisions, with its exact semantics: a pair K:N
 * sets the interval [K MiB, 2K MiB); the first pair also fills every interval
 * below it; ">:N" fills from the last interval named (inclusive) upward. */
static int parse_divisions(struct tunable_value *v, bool bracketed, char *why, size_t why_size)
{
	unsigned long long n;
	int last = 0;
	bool first = true;

	memset(v->divisions, 0, sizeof v->divisions);
	if (v->n_items == 1 && !strchr(v->items[0], ':') && !bracketed) {
		if (parse_count(v->items[0], &n) || (n && !is_pow2(n)) || n > 1u << 20)
			goto bad;
		for (int i = 0; i < DIVISION_INTERVALS; i++)
			v->divisions[i] = (unsigned)n;
		return 0;
	}
	for (size_t k = 0; k < v->n_items; k++) {
		char *item = v->items[k], *colon = strchr(item, ':');
		unsigned long long key = 0;

		if (!colon)
			goto bad;
		*colon = '\0';
		char *key_text = trim_dup(item, strlen(item)), *val_text = trim_dup(colon + 1, strlen(colon + 1));
		*colon = ':';
		int bad_pair = !key_text || !val_text || parse_count(val_text, &n) ||
			       (n && !is_pow2(n)) || n > 1u << 20;
		bool rest = key_text && strcmp(key_text, ">") == 0;
		if (!bad_pair && !rest && (parse_count(key_text, &key) || !is_pow2(key)))
			bad_pair = 1;
		free(key_text);
		free(val_text);
		if (bad_pair)
			goto bad;
		if (rest) {
			for (int i = last; i < DIVISION_INTERVALS; i++)
				v->divisions[i] = (unsigned)n;
			continue;
		}
		int idx = log2_floor(key);
		if (idx >= DIVISION_INTERVALS)
			idx = DIVISION_INTERVALS - 1;
		if (first)
			for (int i = 0; i < idx; i++)
				v->divisions[i] = (unsigned)n;
		first = false;
		v->divisions[idx] = (unsigned)n;
		last = idx;
	}
	return 0;
bad:
	snprintf(why, why_size,
		 _("invalid divisions '%s' (expected 0, a power of two, or a list of "
		   "INTERVAL:DIVISIONS such as [256:1,512:2,>:8], where INTERVAL is a power "
		   "of two in MiB or '>' and DIVISIONS is 0 or a power of two)"),
		 v->str);
	return DEVCACHE_ECONFIG;
}

static bool valid_backend_item(const char *item)
{
	if (*item == '^')
		item++;
	if (!islower((unsigned char)*item))
		return false;
	for (; *item; item++)
		if (!islower((unsigned char)*item) && !isdigit((unsigned char)*item) && *item != '_')
			return false;
	return true;
}

int parse_list(const struct tunable_def *def, const char *text, struct tunable_value *v,
	       char *why, size_t why_size)
{
	bool bracketed;
	int rc = split_list(text, &v->items, &v->n_items, &bracketed, why, why_size);

	if (rc)
		return rc;
	size_t total = 1;
	for (size_t i = 0; i < v->n_items; i++)
		total += strlen(v->items[i]) + 1;
	v->str = malloc(total + 2);
	if (!v->str) {
		snprintf(why, why_size, _("out of memory"));
		return DEVCACHE_ENOMEM;
	}
	char *p = v->str;
	if (bracketed)
		*p++ = '[';
	for (size_t i = 0; i < v->n_items; i++)
		p += sprintf(p, "%s%s", i ? "," : "", v->items[i]);
	strcpy(p, bracketed ? "]" : "");
	if (def->flags & T_DIVISIONS)
		return parse_divisions(v, bracketed, why, why_size);
	if (def == &tunable_defs[TUN_backends])
		for (size_t i = 0; i < v->n_items; i++)
			if (!valid_backend_item(v->items[i])) {
				snprintf(why, why_size,
					 _("invalid backend name '%s' (expected a name such as cuda, "
					   "all, or ^name to exclude one)"),
					 v->items[i]);
				return DEVCACHE_ECONFIG;
			}
	return 0;
}
