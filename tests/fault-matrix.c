/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fault-matrix.c - every call of the workload failed in turn, the rules each run keeps, every call site. */
#include "tap.h"

#include <ctype.h>
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fault-workload.h"

const struct tolerated none[] = {{NULL, NULL, NULL}};
const char *const no_describers[] = {NULL};

/* ---- the matrix --------------------------------------------------------------- */

/* The function's name as the backend writes it: without the _v2 that
 * cuda.h's renaming gives the exported name. */
static void written_name(const char *function, char *buf, size_t size)
{
	char *v;

	snprintf(buf, size, "%s", function);
	if ((v = strrchr(buf, '_')) && v[1] == 'v' && v[2] >= '0' && v[2] <= '9')
		*v = '\0';
}

/* Why the library may fail function in step without a word, or NULL. */
static const char *tolerated_why(const struct vendor *v, const char *function, const char *step)
{
	for (const struct tolerated *t = v->tolerated; t->function; t++)
		if (strcmp(t->function, function) == 0 && (!t->step || strcmp(t->step, step) == 0))
			return t->why;
	return NULL;
}

static bool gives_back(const struct vendor *v, const char *function)
{
	for (const char *const *f = v->releases; *f; f++)
		if (strcmp(*f, function) == 0)
			return true;
	return false;
}

/* ---- every call site ---------------------------------------------------------- */

/* The functions failed in some matrix, by vendor, as the backend writes
 * their names; and the vendors whose matrices ran. */
enum { MAX_COVERED = 256 };
static char covered[MAX_VENDORS][MAX_COVERED][64];
static unsigned n_covered[MAX_VENDORS];
static bool vendor_ran[MAX_VENDORS];

/* The first vendor of v's backend: the one that keeps what the matrices
 * of every runtime of that backend covered. */
static size_t canon(const struct vendor *v)
{
	size_t vi = 0;

	while (strcmp(vendors[vi].backend, v->backend) != 0)
		vi++;
	return vi;
}

static bool is_covered(const struct vendor *v, const char *name)
{
	size_t vi = canon(v);

	for (unsigned i = 0; i < n_covered[vi]; i++)
		if (strcmp(covered[vi][i], name) == 0)
			return true;
	return false;
}

static void covered_add(const struct vendor *v, const char *function)
{
	size_t vi = canon(v);
	char name[64];

	written_name(function, name, sizeof name);
	if (is_covered(v, name))
		return;
	assert_true(n_covered[vi] < MAX_COVERED);
	snprintf(covered[vi][n_covered[vi]++], sizeof covered[vi][0], "%s", name);
}

static bool describes(const struct vendor *v, const char *function)
{
	for (const char *const *d = v->describers; *d; d++)
		if (strcmp(*d, function) == 0)
			return true;
	return false;
}

/* How the runs ended. */
struct tally {
	unsigned functions, runs, failed, recovered, tolerated, at_close;
	unsigned unstable; /* functions left out, their counts varying (threaded()) */
	unsigned missed;   /* runs whose fault did not strike (threaded()) */
	unsigned wrong; /* runs that broke a rule, each said as it is found */
};

/* A rule broken: said at once, and the matrix goes on to show them all. */
#define WRONG(t, ...)                                                                              \
	do {                                                                                       \
		print_message("# " __VA_ARGS__);                                                   \
		print_message("\n");                                                               \
		(t)->wrong++;                                                                      \
	} while (0)

/* The run with the nth call of function failing, and its checks; also
 * says what else is made to fail, for the messages. */
static void one_fault(struct run *r, const char *function, unsigned nth, const char *also,
		      struct tally *t)
{
	char name[128];
	size_t live0 = r->f->live(), kept;
	unsigned long misuses0 = r->f->misuses(NULL);
	bool said;

	snprintf(r->label, sizeof r->label, "%s #%u failing%s", function, nth, also);
	written_name(function, name, sizeof name);
	one_run(r, function, nth);
	t->runs++;
	said = false;
	if (!r->fired_in) {
		/* A clean run (threaded() only: one_run() fails the others). */
		t->missed++;
		goto left;
	}
	said = strstr(r->error, name) || strstr(r->log, name) || strstr(r->expected, name);
	if (r->step) {
		/* The step that failed says which call did. */
		if (!said)
			WRONG(t, "%s: %s in %s: %s failed (%d) with \"%s\", logging \"%s\": neither names %s",
			      r->v->backend, r->label, r->fired_in, r->step, r->rc, r->error, r->log,
			      name);
		t->failed++;
	} else if (tolerated_why(r->v, function, r->fired_in)) {
		t->tolerated++;
	} else if (said) {
		/* Recovered from, and said so; the bytes were checked. */
		if (strcmp(r->fired_in, "close") == 0)
			t->at_close++;
		else
			t->recovered++;
	} else {
		WRONG(t, "%s: %s in %s: the workload went on as if it had succeeded, and nothing said so",
		      r->v->backend, r->label, r->fired_in);
	}
left:
	/* A call that gives an object back and fails leaves that one with
	 * the runtime, and what holds it; so does one that fails on the way
	 * to it, which the library says it was refused. */
	kept = said && (gives_back(r->v, function) || strstr(r->log, "refused to") ||
			(r->step && strcmp(r->step, "stream_destroy") == 0))
		       ? r->v->cascade
		       : 0;
	if (r->f->live() > live0 + kept)
		WRONG(t, "%s: %s in %s: %zu runtime objects live after close, %zu before; step %s: %s",
		      r->v->backend, r->label, r->fired_in, r->f->live(), live0,
		      r->step ? r->step : "none", r->error);
	if (r->f->misuses(NULL) != misuses0)
		WRONG(t, "%s: %s in %s: the fake refused %lu call(s) as misuse (see its messages); step %s: %s",
		      r->v->backend, r->label, r->fired_in, r->f->misuses(NULL) - misuses0,
		      r->step ? r->step : "none", r->error);
}

/* A clean run, whose log must be empty and which must leave nothing. */
static void clean_run(struct run *r)
{
	snprintf(r->label, sizeof r->label, "no fault");
	one_run(r, NULL, 0);
	if (r->step)
		fail_msg("%s: the workload fails with no fault: %s: %s", r->v->backend, r->step,
			 r->error);
	if (r->log_len)
		fail_msg("%s: the workload logs with no fault: %s", r->v->backend, r->log);
}

void fault_matrix(const struct matrix *mx)
{
	const struct vendor *v = mx->v;
	struct fake f = {0};
	struct run r = {.v = v, .options = mx->options, .f = &f};
	struct tally t = {0};
	char path[4096];
	enum { MAX_FUNCTIONS = 256 };
	unsigned long before[MAX_FUNCTIONS], count[MAX_FUNCTIONS], again[MAX_FUNCTIONS];
	unsigned n = 0;
	const char *only = getenv("TEST_FAULT_ONLY");

	assert_true(n_vendors <= MAX_VENDORS);
	void *backend = backend_hold(v->backend);

	if (!backend)
		skip_because("the %s backend is not built (configure found no headers for it)",
			     v->backend);
	snprintf(path, sizeof path, "%s/%s", test_env("TEST_FAKES"), v->fake);
	if (access(path, R_OK) != 0) {
		dlclose(backend);
		skip_because("the fake runtime %s is not built", v->fake);
	}
	assert_true(fake_controls(v, &f));
	vendor_ran[canon(v)] = vendor_ran[canon(v)] || !only;
	/* What runs before left with the fake, refused releases, stays. */
	size_t live0 = f.live();
	unsigned long misuses0 = f.misuses(NULL);
	/* The first run leaves what a thread keeps (its current context) set
	 * up as every later run finds it. */
	clean_run(&r);
	assert_int_equal(f.live(), live0);
	assert_int_equal(f.misuses(NULL), misuses0);
	/* What the workload calls, counted twice: the same both times. */
	for (n = 0; f.function(n); n++) {
		assert_true(n < MAX_FUNCTIONS);
		before[n] = f.calls(f.function(n));
	}
	clean_run(&r);
	for (unsigned i = 0; i < n; i++) {
		count[i] = f.calls(f.function(i)) - before[i];
		before[i] = f.calls(f.function(i));
	}
	clean_run(&r);
	for (unsigned i = 0; i < n; i++) {
		again[i] = f.calls(f.function(i)) - before[i];
		before[i] = f.calls(f.function(i));
		if (again[i] != count[i] && !threaded(mx->options))
			fail_msg("%s: the workload calls %s %lu times, then %lu", v->backend,
				 f.function(i), count[i], again[i]);
	}
	if (threaded(mx->options)) {
		clean_run(&r);
		for (unsigned i = 0; i < n; i++) {
			unsigned long third = f.calls(f.function(i)) - before[i];

			if (count[i] && (again[i] != count[i] || third != count[i])) {
				print_message("# %s%s: %s is called %lu, %lu and %lu times: left to "
					      "the one-worker matrix\n",
					      v->backend, mx->options, f.function(i), count[i],
					      again[i], third);
				count[i] = 0;
				t.unstable++;
			}
		}
	}
	assert_int_equal(f.live(), live0);
	for (unsigned i = 0; i < n; i++) {
		if (!count[i])
			continue;
		t.functions++;
		for (unsigned long k = 1; k <= count[i]; k++) {
			char which[160];

			/* TEST_FAULT_ONLY=function:n runs that one alone. */
			snprintf(which, sizeof which, "%s:%lu", f.function(i), k);
			if (only && strcmp(only, which) != 0)
				continue;
			one_fault(&r, f.function(i), (unsigned)k, "", &t);
			if (only)
				print_message("# error: %s\n# log: %s\n", r.error, r.log);
		}
	}
	if (!only)
		for (unsigned i = 0; i < n; i++)
			if (count[i])
				covered_add(v, f.function(i));
	if (threaded(mx->options)) {
		assert_true(t.functions > 0); /* the copies, at least, are failed */
		if (t.missed * 10 > t.runs)
			fail_msg("%s%s: %u of %u faults did not strike", v->backend, mx->options,
				 t.missed, t.runs);
	}
	/* The calls that describe an error, failing with the call whose
	 * error they describe: each function's first call fails, and every
	 * describer's; the error must still name the function. */
	unsigned described = 0;
	for (unsigned i = 0; i < n && !only && *v->describers && !threaded(mx->options); i++) {
		if (!count[i] || describes(v, f.function(i)))
			continue;
		unsigned long calls0 = 0, calls1 = 0;

		for (const char *const *d = v->describers; *d; d++) {
			calls0 += f.calls(*d);
			f.inject(*d, FAIL_ON | 1, v->code);
		}
		one_fault(&r, f.function(i), 1, ", and every description of an error", &t);
		for (const char *const *d = v->describers; *d; d++) {
			f.inject(*d, 0, 0);
			calls1 += f.calls(*d);
		}
		described++;
		if (calls1 == calls0)
			continue;
		for (const char *const *d = v->describers; *d; d++)
			covered_add(v, *d);
	}
	print_message("# %s%s (%s): %u functions called, %u runs each failing one call (%u with "
		      "the descriptions of errors failing too): %u failed, %u recovered with a "
		      "message, %u tolerated, %u reported at close, %u did not strike\n",
		      v->backend, mx->options, v->fake, t.functions, t.runs, described, t.failed, t.recovered,
		      t.tolerated, t.at_close, t.missed);
	if (t.wrong)
		fail_msg("%s: %u of %u runs broke a rule (listed above)", v->backend, t.wrong,
			 t.runs);
	dlclose(f.lib);
	dlclose(backend);
}

/* Why the backend calls function and no matrix fails it, or NULL. */
static const char *unfailed_why(const struct vendor *v, const char *function)
{
	for (const struct tolerated *u = v->unfailed; u->function; u++)
		if (strcmp(u->function, function) == 0)
			return u->why;
	return NULL;
}

/* Every vendor function that the backend's source calls ("->cuMemAlloc("),
 * failed in one of the vendor's matrices above, or said why it cannot be:
 * a call site added to a backend without a step of the workload that
 * reaches it fails here. */
void every_call_site_of_the_backend_is_failed(void **state)
{
	unsigned checked = 0, missing = 0;

	(void)state;
	assert_true(n_vendors <= MAX_VENDORS);
	if (getenv("TEST_FAULT_ONLY"))
		skip_because("TEST_FAULT_ONLY runs one fault, not every call site");
	for (size_t vi = 0; vi < n_vendors; vi++) {
		const struct vendor *v = &vendors[vi];
		const char *prefix = strcmp(v->backend, "cuda") == 0 ? "cu" : v->backend;
		char path[4096], *src;

		if (!vendor_ran[vi])
			continue;
		snprintf(path, sizeof path, "%s/../backends/%s/%s.c", test_env("TEST_SRCDIR"),
			 v->backend, v->backend);
		src = test_slurp_must(path);
		for (char *p = strstr(src, "->"); p; p = strstr(p + 2, "->")) {
			char name[64];
			size_t n = 0;
			const char *q = p + 2;

			while (n + 1 < sizeof name && (isalnum((unsigned char)q[n]) || q[n] == '_'))
				n++;
			if (q[n] != '(' || strncmp(q, prefix, strlen(prefix)) != 0 ||
			    !isupper((unsigned char)q[strlen(prefix)]))
				continue;
			memcpy(name, q, n);
			name[n] = '\0';
			checked++;
			if (is_covered(v, name) || unfailed_why(v, name))
				continue;
			print_message("# %s: the backend calls %s (%s), which no matrix fails\n",
				      v->backend, name, path);
			missing++;
		}
		free(src);
	}
	if (!checked)
		skip_because("no matrix of this program ran: the %s backend or its fake runtime is "
			     "not built",
			     n_vendors == 1 ? vendors[0].backend : "vendor");
	if (missing)
		fail_msg("%u call sites of the backends are not failed by the workload (listed above)",
			 missing);
}

/* Small devices: expandable segments reserve address space for all of
 * one, which a sanitizer's shadow memory then covers.  What the refused
 * releases of a matrix leave (about 30 MiB) stays allocated in the fake
 * for the rest of the program: room for three matrices of one vendor. */
void small_devices(void)
{
	setenv("FAKE_CUDA_MEMORY_MB", "192", 0);
	setenv("FAKE_HIP_MEMORY_MB", "192", 0);
	setenv("FAKE_ZE_MEMORY_MB", "192", 0);
}
