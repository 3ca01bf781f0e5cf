/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* module-tunables.c - the tunables that backend modules declare: checked, given their values, listed. */
#include "internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void module_tunables_free_one(struct module_tunables *one)
{
	struct module_tunable *t = one->t;

	free((char *)t->def.name);
	free((char *)t->def.defval);
	free((char *)t->def.range);
	free((char *)t->def.summary);
	free((char *)t->def.doc);
	free(t->module);
	free(t->text);
	tunable_value_free(&t->v);
	memset(t, 0, sizeof *t);
}

void module_tunables_free(struct module_tunables *mt)
{
	for (size_t i = 0; i < mt->n; i++)
		module_tunables_free_one(&(struct module_tunables){&mt->t[i], 1});
	free(mt->t);
	mt->t = NULL;
	mt->n = 0;
}

const struct module_tunable *module_tunables_find(const struct module_tunables *mt,
						  const char *name)
{
	for (size_t i = 0; i < mt->n; i++)
		if (strcmp(mt->t[i].def.name, name) == 0)
			return &mt->t[i];
	return NULL;
}

static int set_text(struct module_tunable *t)
{
	char text[4096];

	tunable_format_def(&t->def, &t->v, text, sizeof text);
	free(t->text);
	t->text = strdup(text);
	return t->text ? 0 : err_oom();
}

static bool valid_name(const char *module, const char *name)
{
	size_t len = strlen(module);

	if (strncmp(name, module, len) != 0 || name[len] != '_' || !name[len + 1] ||
	    strlen(name) > 63)
		return false;
	for (const char *c = name; *c; c++)
		if (!islower((unsigned char)*c) && !isdigit((unsigned char)*c) && *c != '_')
			return false;
	return true;
}

/* What is wrong with declaration d, into why; 0 when nothing is. */
static int check_one(const struct module_tunables *mt, const char *module,
		     const struct devcache_backend_tunable *d, struct tunable_def *def, char *why,
		     size_t why_size)
{
	if (!valid_name(module, d->name)) {
		snprintf(why, why_size,
			 _("tunable '%s': a module's tunable is named %s_ and lowercase letters, "
			   "digits or underscores, at most 63 of them"),
			 d->name, module);
		return DEVCACHE_EBACKEND;
	}
	if (tunable_find(d->name) >= 0 || module_tunables_find(mt, d->name)) {
		snprintf(why, why_size, _("tunable '%s' is declared twice"), d->name);
		return DEVCACHE_EBACKEND;
	}
	int type = d->type ? tunable_type_find(d->type) : -1;
	if (type < 0) {
		snprintf(why, why_size, _("tunable '%s': unknown type '%s'"), d->name,
			 d->type ? d->type : "(null)");
		return DEVCACHE_EBACKEND;
	}
	if (!d->default_value || !d->summary || !*d->summary || !d->description) {
		snprintf(why, why_size, _("tunable '%s': no default, summary or description"),
			 d->name);
		return DEVCACHE_EBACKEND;
	}
	if ((type == TT_ENUM && (!d->range || !*d->range)) ||
	    d->reserved[0] || d->reserved[1]) {
		snprintf(why, why_size, _("tunable '%s': %s"), d->name,
			 type == TT_ENUM && (!d->range || !*d->range) ? _("an enum needs its values")
								      : _("reserved members are set"));
		return DEVCACHE_EBACKEND;
	}
	*def = (struct tunable_def){
		.name = d->name,
		.type = (enum tunable_type)type,
		.defval = d->default_value,
		.range = d->range ? d->range : "",
		.group = G_BACKENDS,
		.summary = d->summary,
		.doc = d->description,
	};
	return 0;
}

int module_tunables_declare(struct module_tunables *mt, const char *module,
			    const struct devcache_backend_tunable *decl, char *why, size_t why_size)
{
	size_t n = 0, first = mt->n;

	for (; decl && decl[n].name; n++) {
		struct tunable_def def;
		struct tunable_value v;
		char bad[512];
		int rc = check_one(mt, module, &decl[n], &def, why, why_size);

		if (rc)
			goto undo;
		if ((rc = tunable_parse_def(&def, def.defval, &v, bad, sizeof bad))) {
			if (rc == DEVCACHE_ENOMEM) {
				snprintf(why, why_size, _("out of memory"));
				goto undo;
			}
			snprintf(why, why_size, _("tunable '%s': bad default '%s': %s"), def.name,
				 def.defval, bad);
			rc = DEVCACHE_EBACKEND;
			goto undo;
		}
		struct module_tunable *grown = realloc(mt->t, (mt->n + 1) * sizeof *grown);
		struct module_tunable *t = grown ? &grown[mt->n] : NULL;

		if (grown)
			mt->t = grown;
		if (t) {
			memset(t, 0, sizeof *t);
			t->def = def;
			t->def.name = strdup(def.name);
			t->def.defval = strdup(def.defval);
			t->def.range = strdup(def.range);
			t->def.summary = strdup(def.summary);
			t->def.doc = strdup(def.doc);
			t->module = strdup(module);
			t->v = v;
			t->v.origin = strdup("default");
			mt->n++;
		} else {
			tunable_value_free(&v);
		}
		if (!t || !t->def.name || !t->def.defval || !t->def.range || !t->def.summary ||
		    !t->def.doc || !t->module || !t->v.origin || set_text(t)) {
			snprintf(why, why_size, _("out of memory"));
			rc = DEVCACHE_ENOMEM;
			goto undo;
		}
		continue;
undo:
		/* A module is taken with all its tunables or with none. */
		while (mt->n > first) {
			struct module_tunables last = {&mt->t[mt->n - 1], 1};

			module_tunables_free_one(&last);
			mt->n--;
		}
		return rc;
	}
	return 0;
}

/* Pair i is dealt with: drop it, and pass on rc (0 or the error just set)
 * to report, keeping the first error in *first; returns rc when there is
 * no report to collect errors, so the caller stops at the first. */
static int pending_done(struct tunable_set *set, size_t i, int rc, config_report_fn report,
			void *user, int *first)
{
	free(set->pending[i].key);
	free(set->pending[i].value);
	free(set->pending[i].origin);
	memmove(&set->pending[i], &set->pending[i + 1],
		(--set->n_pending - i) * sizeof *set->pending);
	if (rc && report) {
		report(user, devcache_last_error());
		*first = *first ? *first : rc;
		return 0;
	}
	return rc;
}

int module_tunables_apply(struct module_tunables *mt, struct tunable_set *set,
			  config_report_fn report, void *user)
{
	int first = 0;

	for (size_t i = 0; i < set->n_pending;) {
		struct pending_pair *p = &set->pending[i];
		struct module_tunable *t = (struct module_tunable *)module_tunables_find(mt, p->key);
		struct tunable_value v;
		char why[768];
		int rc;

		if (!t) {
			i++;
			continue;
		}
		rc = tunable_parse_def(&t->def, p->value, &v, why, sizeof why);
		if (rc) {
			rc = err_set(rc, "%s: %s: %s", p->origin, p->key, why);
		} else {
			char *origin = strdup(p->origin);

			if (!origin) {
				tunable_value_free(&v);
				rc = err_oom();
			} else {
				tunable_value_free(&t->v);
				t->v = v;
				t->v.origin = origin;
				rc = set_text(t);
			}
		}
		if ((rc = pending_done(set, i, rc, report, user, &first)))
			return rc;
	}
	return first;
}

int module_tunables_leftover(struct tunable_set *set, const struct module_tunables *mt,
			     const char *const *not_loaded, size_t n_not_loaded,
			     struct log_state *log, config_report_fn report, void *user)
{
	int first = 0;

	while (set->n_pending) {
		struct pending_pair *p = &set->pending[0];
		const char *module = NULL, *hint = tunable_suggest(p->key);
		size_t best = SIZE_MAX;
		int rc = 0;

		for (size_t k = 0; k < n_not_loaded; k++) {
			size_t len = strlen(not_loaded[k]);

			if (strncmp(p->key, not_loaded[k], len) == 0 && p->key[len] == '_')
				module = not_loaded[k];
		}
		for (size_t k = 0; k < mt->n && !module; k++) {
			size_t d = name_distance(p->key, mt->t[k].def.name);

			if (d <= 3 && d * 3 <= strlen(p->key) + 3 && d < best) {
				best = d;
				hint = mt->t[k].def.name;
			}
		}
		if (module)
			log_msg(log, DEVCACHE_LOG_INFO,
				_("%s: %s is ignored: the %s backend module is not loaded"), p->origin,
				p->key, module);
		else if (hint)
			rc = err_set(DEVCACHE_ECONFIG,
				     _("%s: unknown tunable '%s' (did you mean '%s'?)"), p->origin,
				     p->key, hint);
		else
			rc = err_set(DEVCACHE_ECONFIG,
				     _("%s: unknown tunable '%s' (devcache config lists them all)"),
				     p->origin, p->key);
		if ((rc = pending_done(set, 0, rc, report, user, &first)))
			return rc;
	}
	return first;
}
