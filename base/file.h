/* file.h: files as tg writes them (file.c): whole, atomically, durably.
 *
 * Nothing the user had is lost: a file is written beside its target under
 * a temporary name, synced, and renamed over it, so a reader (or a crash)
 * sees the old file or the new one, never half of one; then the directory
 * is synced, so that the rename itself survives a power loss. */
#ifndef TG_FILE_H
#define TG_FILE_H

#include <stdbool.h>
#include <stddef.h>

/* dir/name, malloc'ed. */
char *tg_path_join(const char *dir, const char *name);

/* Reads all of path into a malloc'ed buffer (*buf, *size bytes, with a NUL
 * after the last byte that *size does not count).  False with a message
 * naming the file and the reason. */
bool tg_read_whole_file(const char *path, char **buf, size_t *size, char *why, size_t whylen);

/* Writes data[0 .. n) to path atomically: PATH.tmp.PID (created, not
 * followed if a link), fsync, rename, then the directory synced.  False
 * with a message naming the file; the temporary is removed and any old
 * file at path is left as it was. */
bool tg_write_file_atomic(const char *path, const void *data, size_t n, char *why, size_t whylen);

/* Syncs the directory holding path, so that a rename into it is durable.
 * Best effort: some file systems cannot sync a directory. */
void tg_sync_parent_dir(const char *path);
/* Syncs the directory dir itself (best effort, as above). */
void tg_sync_dir(const char *dir);

/* mkdir -p: dir and every missing parent.  False with a message naming the
 * component that could not be made, or dir when it exists and is not a
 * directory. */
bool tg_make_dirs(const char *dir, char *why, size_t whylen);

/* An exclusive flock on path (created if missing), not waited for, with
 * "pid P on HOST" written in it for the next comer's message.  Returns the
 * descriptor to keep (closing it releases the lock; the kernel releases it
 * too however the process dies, so a leftover file blocks nothing), or -1
 * with *busy set when another process holds it (why: its pid and host, as
 * written), *busy clear on any other failure (why: the reason). */
int tg_lock_file(const char *path, bool *busy, char *why, size_t whylen);

#endif
