/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* trace.h - recording allocation and free events for replay (the format is devcache-trace(5)). */
#ifndef DEVCACHE_TRACE_H
#define DEVCACHE_TRACE_H

#include <stddef.h>
#include <stdint.h>

struct log_state;
struct trace;

/* Open the trace file named by the trace tunable's value for one device:
 * "%p" becomes the process ID and "%d" the device ID ("host", "cuda:0").
 * Devices whose expanded names are equal share one file (and one struct
 * trace, reference-counted by the caller's context); the file starts with
 * comment lines naming the program, the library version and the device,
 * and device_memory, the memory the device's allocator may have (0: not
 * written).
 * Returns 0 or a DEVCACHE_E* code with the detail message set. */
int trace_open(struct trace **trace_p, const char *name_template, const char *device_id,
	       uint64_t device_memory, struct log_state *log);
/* "+ ID SIZE [STREAM]": SIZE is the size asked for; STREAM is the stream's
 * index on its device (0, the default stream, is omitted).  Thread-safe. */
void trace_alloc(struct trace *trace, uint64_t id, size_t size, unsigned stream);
/* "- ID".  Thread-safe. */
void trace_free(struct trace *trace, uint64_t id);
/* Flush and close; a write error is logged once, never fatal. */
void trace_close(struct trace *trace);

/* For sharing: the file name name_template gives for device_id, as
 * trace_open would open it ("%%" becomes "%"), in *path_p (malloc'd, the
 * caller frees it).  Returns 0, or DEVCACHE_ECONFIG for any other '%'
 * sequence or an empty name, or DEVCACHE_ENOMEM, with the detail message set. */
int trace_expand(const char *name_template, const char *device_id, char **path_p);
/* The expanded name of an open trace, to compare with trace_expand's. */
const char *trace_path(const struct trace *trace);
/* Another device writes to this trace too: records a "# device: ID" line. */
void trace_add_device(struct trace *trace, const char *device_id);

/* Event lines are whole in the file even when the program dies: the buffer
 * is written out in whole lines.  Allocation sizes are at least 1 (the
 * reader refuses 0), so a zero-size request is traced neither when made nor
 * when freed.  The first write error is logged, outside the trace's lock,
 * from whichever call met it; the events after it are dropped. */

#endif
