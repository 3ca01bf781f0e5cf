/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* tunables.c - parse, check, format and hold tunable values; every source goes through tunable_parse. */

/* The numbers, sizes and ranges of the values, the entry point for every
 * type, the sets of values and their formatting are here; tunable-names.c
 * looks names up and suggests one for a slip, tunable-lists.c parses list
 * values (roundup_power2_divisions among them). */
#include "internal.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- numbers and sizes ---------------------------------------------------- */

const char *skip_space(const char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	return s;
}

static bool is_blank(const char *s)
{
	return *skip_space(s) == '\0';
}

static uint64_t gcd_u64(uint64_t a, uint64_t b)
{
	while (b) {
		uint64_t r = a % b;

		a = b;
		b = r;
	}
	return a;
}

/* A size: digits, an optional fraction, an optional binary unit. */
static int parse_size_text(const char *text, bool bare_mib, uint64_t *out)
{
	const char *s = skip_space(text);
	char *end;
	uint64_t mult;

	if (!isdigit((unsigned char)*s))
		return -1;
	errno = 0;
	unsigned long long whole = strtoull(s, &end, 10);
	if (errno)
		return -1;
	/* The fraction as an exact ratio, so 1.75G is exactly 1879048192 bytes. */
	uint64_t frac_num = 0, frac_den = 1;
	if (*end == '.') {
		const char *f = end + 1;

		if (!isdigit((unsigned char)*f))
			return -1;
		for (; isdigit((unsigned char)*f); f++) {
			if (frac_den >= 1000000000000000000ULL)
				return -1;
			frac_num = frac_num * 10 + (uint64_t)(*f - '0');
			frac_den *= 10;
		}
		end = (char *)f;
	}
	const char *unit = skip_space(end);
	size_t ulen = strlen(unit);
	while (ulen && isspace((unsigned char)unit[ulen - 1]))
		ulen--;
	if (ulen == 0) {
		mult = bare_mib ? 1ULL << 20 : 1;
	} else {
		static const char letters[] = "bkmgt";
		const char *p = strchr(letters, tolower((unsigned char)unit[0]));

		if (!p)
			return -1;
		mult = 1ULL << (10 * (p - letters));
		/* K, KB, KiB; but B alone, not "BB" or "BiB" */
		if (ulen == 2 && (p == letters || tolower((unsigned char)unit[1]) != 'b'))
			return -1;
		if (ulen == 3 && (p == letters || tolower((unsigned char)unit[1]) != 'i' ||
				  tolower((unsigned char)unit[2]) != 'b'))
			return -1;
		if (ulen > 3)
			return -1;
	}
	if (whole > UINT64_MAX / mult)
		return -1;
	uint64_t bytes = whole * mult;
	/* frac_num * mult / frac_den in 64 bits (no __int128 on 32-bit
	 * targets): in lowest terms the denominator must divide mult, or the
	 * size has a fraction of a byte. */
	uint64_t g = gcd_u64(frac_num, frac_den), num = frac_num / g, den = frac_den / g;
	if (mult % den)
		return -1;
	if (num > UINT64_MAX / (mult / den))
		return -1;
	uint64_t extra = num * (mult / den);
	if (extra > UINT64_MAX - bytes)
		return -1;
	*out = bytes + extra;
	return 0;
}

static int parse_ll(const char *text, long long *out)
{
	char *end;

	errno = 0;
	*out = strtoll(skip_space(text), &end, 10);
	return errno || end == skip_space(text) || !is_blank(end) ? -1 : 0;
}

/* Numbers in option strings and files are written with a decimal point
 * whatever the program's LC_NUMERIC (a German one reads "0.5" as 0). */
static double c_strtod(const char *text, char **end)
{
	locale_t c = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
	double v;

	if (c == (locale_t)0)
		return strtod(text, end);
	v = strtod_l(text, end, c);
	freelocale(c);
	return v;
}

/* "%.*g" with a decimal point, whatever the program's LC_NUMERIC. */
static void c_format_g(char *buf, size_t size, int prec, double v)
{
	locale_t c = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
	locale_t old = c != (locale_t)0 ? uselocale(c) : (locale_t)0;

	snprintf(buf, size, "%.*g", prec, v);
	if (c != (locale_t)0) {
		uselocale(old);
		freelocale(c);
	}
}

static int parse_double(const char *text, double *out)
{
	char *end;

	errno = 0;
	*out = c_strtod(skip_space(text), &end);
	return errno || end == skip_space(text) || !is_blank(end) || !isfinite(*out) ? -1 : 0;
}

/* ---- ranges: "[lo,hi]", "(lo,hi)", either bound may be empty ------------ */

struct range {
	bool has_lo, has_hi, lo_open, hi_open;
	double lo, hi; /* ints, floats and sizes all fit well enough for checks */
	char lo_text[32], hi_text[32];
};

static void parse_range(const struct tunable_def *def, struct range *r)
{
	const char *s = def->range;
	const char *comma = strchr(s, ',');
	size_t len = strlen(s);

	memset(r, 0, sizeof *r);
	if (len < 3 || !comma)
		return;
	r->lo_open = s[0] == '(';
	r->hi_open = s[len - 1] == ')';
	snprintf(r->lo_text, sizeof r->lo_text, "%.*s", (int)(comma - s - 1), s + 1);
	snprintf(r->hi_text, sizeof r->hi_text, "%.*s", (int)(s + len - 1 - comma - 1), comma + 1);
	for (int k = 0; k < 2; k++) {
		const char *t = k ? r->hi_text : r->lo_text;
		double *d = k ? &r->hi : &r->lo;
		bool *has = k ? &r->has_hi : &r->has_lo;
		uint64_t sz;

		if (!*t)
			continue;
		*has = true;
		if (def->type == TT_SIZE && parse_size_text(t, false, &sz) == 0)
			*d = (double)sz;
		else
			*d = c_strtod(t, NULL);
	}
}

static bool in_range(const struct range *r, double v)
{
	if (r->has_lo && (r->lo_open ? v <= r->lo : v < r->lo))
		return false;
	if (r->has_hi && (r->hi_open ? v >= r->hi : v > r->hi))
		return false;
	return true;
}

static void describe_range(const struct range *r, char *buf, size_t size)
{
	char lo[96] = "", hi[96] = "";

	if (r->has_lo)
		snprintf(lo, sizeof lo, r->lo_open ? _("greater than %s") : _("at least %s"),
			 r->lo_text);
	if (r->has_hi)
		snprintf(hi, sizeof hi, r->hi_open ? _("less than %s") : _("at most %s"),
			 r->hi_text);
	if (*lo && *hi)
		snprintf(buf, size, _("%s and %s"), lo, hi);
	else
		snprintf(buf, size, "%s%s", lo, hi);
}

/* ---- one entry point for every type -------------------------------------- */

static void expected_text(const struct tunable_def *def, char *buf, size_t size)
{
	char extra[64] = "";

	switch (def->type) {
	case TT_BOOL:
		snprintf(buf, size, "%s", _("true or false (also yes/no, on/off, 1/0)"));
		return;
	case TT_INT:
		snprintf(buf, size, "%s", _("an integer"));
		return;
	case TT_FLOAT:
		snprintf(buf, size, "%s", _("a number such as 0.5"));
		return;
	case TT_SIZE:
		if (def->flags & T_AUTO)
			snprintf(extra, sizeof extra, "%s", _(", or auto"));
		if (def->flags & T_UNLIMITED)
			snprintf(extra, sizeof extra, "%s", _(", or unlimited"));
		snprintf(buf, size,
			 def->flags & T_MIB ? _("a size in MiB such as 512, or with a unit such "
						"as 2G%s")
					    : _("a size such as 4096, 64K, 512M or 2G%s"),
			 extra);
		return;
	case TT_ENUM: {
		char list[128];
		size_t i = 0;

		for (const char *r = def->range; *r && i + 3 < sizeof list; r++) {
			if (*r == '|') {
				list[i++] = ',';
				list[i++] = ' ';
			} else {
				list[i++] = *r;
			}
		}
		list[i] = '\0';
		snprintf(buf, size, _("one of: %s"), list);
		return;
	}
	default:
		snprintf(buf, size, "%s", _("a value"));
	}
}

static int parse_enum(const struct tunable_def *def, const char *text, int *out)
{
	const char *r = def->range;
	size_t len = strlen(text);

	for (int idx = 0; *r; idx++) {
		const char *bar = strchr(r, '|');
		size_t rl = bar ? (size_t)(bar - r) : strlen(r);

		if (rl == len && strncasecmp(r, text, len) == 0) {
			*out = idx;
			return 0;
		}
		r += rl + (bar != NULL);
	}
	return -1;
}

static int parse_bool(const char *text, bool *out)
{
	static const char *const yes[] = {"true", "yes", "on", "1"};
	static const char *const no[] = {"false", "no", "off", "0"};

	for (size_t i = 0; i < 4; i++) {
		if (strcasecmp(text, yes[i]) == 0)
			return *out = true, 0;
		if (strcasecmp(text, no[i]) == 0)
			return *out = false, 0;
	}
	return -1;
}

/* One message for each type, not "invalid %s" with the type's English name
 * put in: a translation words each as its language needs.  The text is the
 * user's: err_format() shows it safely and bounds it, so that the expected
 * form after it survives in the message that quotes why. */
static void say_invalid(enum tunable_type type, const char *text, const char *expected, char *why,
			size_t why_size)
{
	switch (type) {
	case TT_BOOL:
		err_format(why, why_size, _("invalid bool '%s' (expected %s)"), text, expected);
		break;
	case TT_INT:
		err_format(why, why_size, _("invalid int '%s' (expected %s)"), text, expected);
		break;
	case TT_FLOAT:
		err_format(why, why_size, _("invalid float '%s' (expected %s)"), text, expected);
		break;
	case TT_SIZE:
		err_format(why, why_size, _("invalid size '%s' (expected %s)"), text, expected);
		break;
	default:
		err_format(why, why_size, _("invalid enum '%s' (expected %s)"), text, expected);
		break;
	}
}

int tunable_parse(enum tunable_id id, const char *raw, struct tunable_value *out, char *why,
		  size_t why_size)
{
	return tunable_parse_def(&tunable_defs[id], raw, out, why, why_size);
}

int tunable_parse_def(const struct tunable_def *def, const char *raw, struct tunable_value *out,
		      char *why, size_t why_size)
{
	char expected[256], *text = trim_dup(raw, strlen(raw));
	struct range range;
	double num = 0;
	int rc = 0;

	memset(out, 0, sizeof *out);
	if (!text) {
		err_format(why, why_size, _("out of memory"));
		return DEVCACHE_ENOMEM;
	}
	expected_text(def, expected, sizeof expected);
	parse_range(def, &range);
	if (!*text && def->type != TT_STRING) {
		err_format(why, why_size, _("missing value (expected %s)"), expected);
		rc = DEVCACHE_ECONFIG;
		goto out;
	}
	if ((def->flags & T_AUTO) && strcasecmp(text, "auto") == 0) {
		out->special = TV_AUTO;
		goto out;
	}
	if ((def->flags & T_UNLIMITED) && strcasecmp(text, "unlimited") == 0) {
		out->special = TV_UNLIMITED;
		out->u.size = UINT64_MAX;
		goto out;
	}
	switch (def->type) {
	case TT_BOOL:
		rc = parse_bool(text, &out->u.b);
		break;
	case TT_INT:
		rc = parse_ll(text, &out->u.i);
		num = (double)out->u.i;
		break;
	case TT_FLOAT:
		rc = parse_double(text, &out->u.f);
		num = out->u.f;
		break;
	case TT_SIZE:
		rc = parse_size_text(text, def->flags & T_MIB, &out->u.size);
		num = (double)out->u.size;
		break;
	case TT_ENUM:
		rc = parse_enum(def, text, &out->u.e);
		break;
	case TT_STRING:
		out->str = strdup(text);
		if (!out->str) {
			err_format(why, why_size, _("out of memory"));
			rc = DEVCACHE_ENOMEM;
		}
		goto out;
	case TT_LIST:
		rc = parse_list(def, text, out, why, why_size);
		goto out;
	}
	if (rc) {
		say_invalid(def->type, text, expected, why, why_size);
		rc = DEVCACHE_ECONFIG;
	} else if (def->type != TT_BOOL && def->type != TT_ENUM && !in_range(&range, num)) {
		char accepted[192];

		describe_range(&range, accepted, sizeof accepted);
		err_format(why, why_size, _("'%s' is out of range (accepted: %s%s%s)"), text,
			 accepted, def->flags & T_UNLIMITED ? _(", or unlimited") : "",
			 def->flags & T_AUTO ? _(", or auto") : "");
		rc = DEVCACHE_ECONFIG;
	}
out:
	free(text);
	if (rc)
		tunable_value_free(out);
	return rc;
}

void tunable_value_free(struct tunable_value *v)
{
	for (size_t i = 0; i < v->n_items; i++)
		free(v->items[i]);
	free(v->items);
	free(v->str);
	free(v->origin);
	memset(v, 0, sizeof *v);
}

int tunable_assign(struct tunable_set *set, enum tunable_id id, struct tunable_value *value,
		   const char *origin)
{
	char *copy = strdup(origin);

	if (!copy) {
		tunable_value_free(value);
		return err_oom();
	}
	tunable_value_free(&set->v[id]);
	set->v[id] = *value;
	set->v[id].origin = copy;
	memset(value, 0, sizeof *value);
	return 0;
}

int tunable_set_defaults(struct tunable_set *set)
{
	memset(set, 0, sizeof *set);
	for (int i = 0; i < TUN_COUNT; i++) {
		struct tunable_value v;
		char why[512];
		int rc = tunable_parse(i, tunable_defs[i].defval, &v, why, sizeof why);

		/* Defaults go through the user's parser, so a bad one is a bug in
		 * tunables.def that the test suite catches. */
		if (rc == 0)
			rc = tunable_assign(set, i, &v, "default");
		else
			err_set(rc, "%s: %s: %s", _("built-in default"), tunable_defs[i].name, why);
		if (rc) {
			tunable_set_free(set);
			return rc;
		}
	}
	return 0;
}

void tunable_set_free(struct tunable_set *set)
{
	for (int i = 0; i < TUN_COUNT; i++)
		tunable_value_free(&set->v[i]);
	for (size_t i = 0; i < set->n_pending; i++) {
		free(set->pending[i].key);
		free(set->pending[i].value);
		free(set->pending[i].origin);
	}
	free(set->pending);
	set->pending = NULL;
	set->n_pending = 0;
}

int tunable_set_pending(struct tunable_set *set, const char *key, const char *value,
			const char *origin)
{
	struct pending_pair p;
	size_t i = 0;

	while (i < set->n_pending && strcmp(set->pending[i].key, key) != 0)
		i++;
	/* The cap keeps this search, and the modules' later passes over the
	 * pairs, linear in the length of the input. */
	if (i == PENDING_MAX)
		return err_set(DEVCACHE_ECONFIG,
			       _("%s: unknown tunable '%s': more than %u tunables unknown to the core "
				 "(perhaps backend modules') are set"),
			       origin, key, PENDING_MAX);
	p = (struct pending_pair){strdup(key), strdup(value), strdup(origin)};
	if (p.key && p.value && p.origin && i == set->n_pending) {
		struct pending_pair *grown =
			realloc(set->pending, (set->n_pending + 1) * sizeof *grown);

		if (grown) {
			set->pending = grown;
			set->pending[set->n_pending++] = p;
			return 0;
		}
	} else if (p.key && p.value && p.origin) {
		/* A later source overrides an earlier one, as for any tunable. */
		free(set->pending[i].key);
		free(set->pending[i].value);
		free(set->pending[i].origin);
		set->pending[i] = p;
		return 0;
	}
	free(p.key);
	free(p.value);
	free(p.origin);
	return err_oom();
}

void tunable_format(enum tunable_id id, const struct tunable_value *v, char *buf, size_t size)
{
	tunable_format_def(&tunable_defs[id], v, buf, size);
}

void tunable_format_def(const struct tunable_def *def, const struct tunable_value *v, char *buf,
			size_t size)
{

	if (v->special == TV_AUTO) {
		snprintf(buf, size, "auto");
		return;
	}
	if (v->special == TV_UNLIMITED) {
		snprintf(buf, size, "unlimited");
		return;
	}
	switch (def->type) {
	case TT_BOOL:
		snprintf(buf, size, "%s", v->u.b ? "true" : "false");
		break;
	case TT_INT:
		snprintf(buf, size, "%lld", v->u.i);
		break;
	case TT_FLOAT:
		/* The shortest text that reads back as the same double. */
		for (int prec = 1; prec <= 17; prec++) {
			c_format_g(buf, size, prec, v->u.f);
			if (c_strtod(buf, NULL) == v->u.f)
				break;
		}
		break;
	case TT_SIZE:
		format_size(v->u.size, buf, size);
		/* A bare number would read back as MiB. */
		if ((def->flags & T_MIB) && buf[strspn(buf, "0123456789")] == '\0')
			snprintf(buf + strlen(buf), size - strlen(buf), "B");
		break;
	case TT_ENUM: {
		const char *r = def->range;

		for (int i = 0; i < v->u.e && strchr(r, '|'); i++)
			r = strchr(r, '|') + 1;
		snprintf(buf, size, "%.*s", (int)strcspn(r, "|"), r);
		break;
	}
	case TT_STRING:
	case TT_LIST:
		snprintf(buf, size, "%s", v->str ? v->str : "");
		break;
	}
}
