/* executors.h: every executor tg has, by name (executors.c).
 *
 * The one place that lists the backends, as QBE's driver lists its
 * targets: the training loop and tgrun open a device by name here and then
 * use only executor.h.  No other file outside a backend's own folder names
 * anything of a backend (tests/arch/check_architecture.py checks it). */
#ifndef TG_EXECUTORS_H
#define TG_EXECUTORS_H

#include "executor.h"

/* The executor called name ("ref", "cpu"), or NULL. */
const tg_executor *tg_executor_find(const char *name);
/* All of them, in the order --help lists them; *n gets the count. */
const tg_executor *const *tg_executors(int *n);
const char *tg_executor_name(const tg_executor *x);
const char *tg_executor_summary(const tg_executor *x);
/* The precision policy runs on x get unless they ask for one: "bf16" on
 * the cuda backends, "f32" on the CPU (passes.h: tg_precision_parse). */
const char *tg_executor_default_precision(const tg_executor *x);
/* "ref, cpu": the names, for messages. */
const char *tg_executor_names_text(void);
/* The name nearest to a misspelt one ("cdu" -> "cpu"), or NULL. */
const char *tg_executor_suggest(const char *name);

/* Opens the executor called name; an unknown name is an error through ctx
 * naming the known ones (and the nearest, if it looks like a typo). */
tg_device *tg_device_open_named(tg_ctx *ctx, const char *name, const tg_device_opts *o);

#endif
