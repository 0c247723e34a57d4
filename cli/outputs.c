/* Output files of one `longattn run`: every output is checked and its
 * temporary created before anything is computed, written at the end, and
 * renamed into place only when the whole run succeeded.
 *
 * - A temporary is created with mkstemp (O_CREAT|O_EXCL, a random name)
 *   beside its output, so no planted file or link is ever followed and
 *   rename() is atomic; it is registered for removal if the process is
 *   killed by SIGINT, SIGTERM or SIGHUP.
 * - Character devices and FIFOs (/dev/null, a pipe given as /dev/stdout)
 *   are written in place at the end; block devices and sockets are refused.
 * - An output that is the same file (device and inode) as another output,
 *   or as an input without --force, is refused before computing; so is a
 *   directory, a dangling symbolic link or a directory we cannot write in.
 * - A symbolic link to a regular file is followed: the file it names is
 *   replaced, as `>` in a shell would write to it.
 * - On failure only this run's temporaries are removed; a failure after a
 *   rename leaves the outputs already in place (complete results) and says
 *   which were and were not written. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

/* ---- signal cleanup -------------------------------------------------------
 * The only process state of the CLI: the names a signal handler must unlink
 * (and tmp_creating below).
 * A slot's name is written before `live` is set and `live` cleared before
 * the slot is reused, so the handler (async-signal-safe: unlink, signal,
 * raise) never reads a half-written name. */
#define CLI_TMP_SLOTS CLI_MAX_ITEMS
static char tmp_names[CLI_TMP_SLOTS][PATH_MAX];
static volatile sig_atomic_t tmp_live[CLI_TMP_SLOTS];
static volatile sig_atomic_t handlers_installed;
/* 1 while a thread is between a temporary's mkostemp and its registration
 * (cli_tmp_create, with these signals blocked in that thread) */
static atomic_int tmp_creating;

static void on_signal(int sig) {
    /* the signal reached another thread (the CUDA runtime's, say) while the
     * creating one is inside its window: wait for the name to be registered
     * (lock-free atomics are async-signal-safe) */
    while (atomic_load(&tmp_creating)) {
    }
    for (int i = 0; i < CLI_TMP_SLOTS; i++)
        if (tmp_live[i]) unlink(tmp_names[i]);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void install_handlers(void) {
    if (handlers_installed) return;
    handlers_installed = 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGINT);
    sigaddset(&sa.sa_mask, SIGTERM);
    sigaddset(&sa.sa_mask, SIGHUP);
    const int sigs[3] = {SIGINT, SIGTERM, SIGHUP};
    for (int i = 0; i < 3; i++) {
        struct sigaction old;
        /* keep an ignored signal ignored (nohup) */
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        sigaction(sigs[i], &sa, NULL);
    }
}

int cli_tmp_register(const char *path) {
    install_handlers();
    if (strlen(path) >= PATH_MAX) return -1;
    for (int i = 0; i < CLI_TMP_SLOTS; i++) {
        if (tmp_live[i]) continue;
        memcpy(tmp_names[i], path, strlen(path) + 1);
        tmp_live[i] = 1;
        return i;
    }
    return -1;
}

/* mkostemp(tmpl, O_CLOEXEC) and the name's registration with the signals
 * the handler catches blocked in between: a signal arriving while the file
 * exists but is not registered yet would otherwise leave it behind. Sent to
 * this thread, it is delivered at the unblock, with the name registered;
 * taken by another thread of the process, its handler waits on
 * tmp_creating. *slot: the slot, -1 when none is free. Returns the
 * descriptor, or -1 with errno set. */
int cli_tmp_create(char *tmpl, int *slot) {
    install_handlers();
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    atomic_store(&tmp_creating, 1);
    const int fd = mkostemp(tmpl, O_CLOEXEC);
    const int e = errno;
    *slot = fd >= 0 ? cli_tmp_register(tmpl) : -1;
    atomic_store(&tmp_creating, 0);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = e;
    return fd;
}

void cli_tmp_release(int slot) {
    if (slot >= 0 && slot < CLI_TMP_SLOTS) tmp_live[slot] = 0;
}

/* ---- inputs --------------------------------------------------------------- */
int cli_note_input(cli_state *c, const char *opt, const char *path) {
    struct stat st;
    if (!path || c->nins >= CLI_MAX_ITEMS || stat(path, &st) != 0) return 0; /* cli_load reports it */
    cli_input *in = &c->ins[c->nins++];
    in->opt = opt;
    in->path = path;
    in->dev = st.st_dev;
    in->ino = st.st_ino;
    /* an input named after the outputs were planned (a --state-in file) */
    for (int i = 0; i < c->nouts && !c->force; i++) {
        const cli_output *o = &c->outs[i];
        if (o->existed && o->dev == in->dev && o->ino == in->ino)
            return cli_fail("--%s %s is the same file as input --%s %s: refusing to replace an input "
                            "(pass --force to allow it)", o->opt, o->shown, opt, path);
    }
    return 0;
}

/* ---- planning ------------------------------------------------------------- */
static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    if (slash == path) return strdup("/");
    char *d = strndup(path, (size_t)(slash - path));
    return d;
}

static void free_output(cli_output *o) {
    free(o->path);
    free(o->shown);
    free(o->tmp);
    free(o->base);
    memset(o, 0, sizeof *o);
    o->fd = -1;
    o->slot = -1;
}

static int same_target(const cli_output *a, const cli_output *b) {
    if (a->existed && b->existed) return a->dev == b->dev && a->ino == b->ino;
    return a->ddev == b->ddev && a->dino == b->dino && strcmp(a->base, b->base) == 0;
}

int cli_plan_output(cli_state *c, const char *opt, const char *path, const char *may_replace) {
    if (!path || !*path) return cli_fail("--%s: empty path", opt);
    if (c->nouts >= CLI_MAX_ITEMS) return cli_fail("too many outputs (internal)");
    const size_t plen = strlen(path);
    if (plen >= PATH_MAX - 16) return cli_fail("--%s %s: path too long", opt, path);
    if (path[plen - 1] == '/') return cli_fail("--%s %s: names a directory, expected a file", opt, path);
    cli_output o;
    memset(&o, 0, sizeof o);
    o.fd = -1;
    o.slot = -1;
    o.opt = opt;
    o.shown = strdup(path);
    struct stat lst, st;
    const int have_l = lstat(path, &lst) == 0;
    const int have = stat(path, &st) == 0;
    if (have_l && S_ISLNK(lst.st_mode) && !have) {
        free_output(&o);
        return cli_fail("--%s %s: a symbolic link to a file that does not exist", opt, path);
    }
    if (!have_l && errno != ENOENT) {
        int e = errno;
        free_output(&o);
        return cli_fail("--%s %s: %s", opt, path, strerror(e));
    }
    if (have) {
        o.existed = 1;
        o.dev = st.st_dev;
        o.ino = st.st_ino;
        if (S_ISDIR(st.st_mode)) {
            free_output(&o);
            return cli_fail("--%s %s: is a directory, expected a file", opt, path);
        }
        if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) {
            o.direct = 1;
        } else if (!S_ISREG(st.st_mode)) {
            free_output(&o);
            return cli_fail("--%s %s: not a regular file, character device or FIFO (%s)", opt, path,
                            S_ISBLK(st.st_mode) ? "a block device" : "a socket");
        }
    }
    /* a link to a regular file: replace the file it names */
    if (have && !o.direct && S_ISLNK(lst.st_mode)) {
        char *real = realpath(path, NULL);
        if (!real) {
            int e = errno;
            free_output(&o);
            return cli_fail("--%s %s: cannot resolve the link: %s", opt, path, strerror(e));
        }
        o.path = real;
    } else {
        o.path = strdup(path);
    }
    char *dir = dir_of(o.path);
    const char *slash = strrchr(o.path, '/');
    o.base = strdup(slash ? slash + 1 : o.path);
    if (!o.path || !o.shown || !dir || !o.base) {
        free(dir);
        free_output(&o);
        return cli_fail("out of memory");
    }
    struct stat dst;
    const int have_dir = stat(dir, &dst) == 0;
    if (!have_dir || !S_ISDIR(dst.st_mode)) {
        int e = errno;
        int rc = cli_fail("--%s %s: directory %s: %s", opt, path, dir,
                          have_dir ? "not a directory" : strerror(e));
        free(dir);
        free_output(&o);
        return rc;
    }
    o.ddev = dst.st_dev;
    o.dino = dst.st_ino;
    for (int i = 0; i < c->nouts; i++) {
        /* two results into one device or FIFO (/dev/null twice) lose nothing */
        if (o.direct && c->outs[i].direct) continue;
        if (same_target(&o, &c->outs[i])) {
            int rc = cli_fail("--%s %s and --%s %s name the same file", c->outs[i].opt, c->outs[i].shown,
                              opt, path);
            free(dir);
            free_output(&o);
            return rc;
        }
    }
    if (o.existed) {
        for (int i = 0; i < c->nins; i++) {
            const cli_input *in = &c->ins[i];
            if (in->dev != o.dev || in->ino != o.ino) continue;
            if (may_replace && strcmp(in->opt, may_replace) == 0) continue;
            if (c->force) continue;
            int rc = cli_fail("--%s %s is the same file as input --%s %s: refusing to replace an input "
                              "(pass --force to allow it)", opt, path, in->opt, in->path);
            free(dir);
            free_output(&o);
            return rc;
        }
    }
    if (!o.direct) {
        size_t n = strlen(dir) + strlen(o.base) + 16;
        o.tmp = (char *)malloc(n);
        if (!o.tmp) {
            free(dir);
            free_output(&o);
            return cli_fail("out of memory");
        }
        snprintf(o.tmp, n, "%s/.%s.XXXXXX", dir, o.base);
        o.fd = cli_tmp_create(o.tmp, &o.slot);
        if (o.fd < 0) {
            int e = errno;
            int rc = cli_fail("--%s %s: cannot create a file in directory %s: %s", opt, path, dir, strerror(e));
            free(o.tmp);
            o.tmp = NULL;
            free(dir);
            free_output(&o);
            return rc;
        }
        /* the mode a new file gets (mkstemp makes 0600) */
        mode_t um = umask(0);
        umask(um);
        fchmod(o.fd, 0666 & ~um);
    }
    free(dir);
    c->outs[c->nouts++] = o;
    return 0;
}

/* ---- writing -------------------------------------------------------------- */
/* The planned, not yet written output of `path` (and of option `opt` when
 * given: one device may take several outputs). */
static cli_output *find_output(cli_state *c, const char *opt, const char *path) {
    for (int i = 0; i < c->nouts; i++) {
        cli_output *o = &c->outs[i];
        if (!o->written && strcmp(o->shown, path) == 0 && (!opt || strcmp(o->opt, opt) == 0)) return o;
    }
    return NULL;
}

static int save_output(cli_state *c, const char *opt, const char *path, const la_tensor *host,
                       const la_tensor *dev) {
    cli_output *o = find_output(c, opt, path);
    if (!o) {
        /* every output is planned before computing; plan late rather than fail */
        if (cli_plan_output(c, opt ? opt : "out", path, NULL)) return 2;
        o = &c->outs[c->nouts - 1];
    }
    if (dev && dev->device == LA_DEVICE_CUDA && dev->data != host->data) {
        char msg[256];
        size_t bytes = (size_t)cli_numel(host) * la_dtype_size(host->dtype);
        if (cli_dev_synchronize(msg, sizeof msg) != LA_OK ||
            cli_dev_download(host->data, dev->data, bytes, msg, sizeof msg) != LA_OK)
            return cli_fail("--%s: %s", o->opt, msg);
    }
    int fd = o->fd;
    if (o->direct) {
        fd = open(o->path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0) return cli_fail("--%s %s: cannot open for writing: %s", o->opt, o->shown, strerror(errno));
    }
    int e = cli_npy_write_fd(fd, host->dtype, host->ndim, host->ne, host->data);
    if (o->direct) {
        if (close(fd) != 0 && !e) e = errno;
    } else {
        if (close(o->fd) != 0 && !e) e = errno;
        o->fd = -1;
    }
    if (e) return cli_fail("--%s %s: write failed: %s", o->opt, o->shown, strerror(e));
    o->written = 1;
    return 0;
}

int cli_save_path(cli_state *c, const char *path, const la_tensor *host, const la_tensor *dev) {
    return save_output(c, NULL, path, host, dev);
}

int cli_save(cli_state *c, const cli_args *a, const char *opt, const la_tensor *host,
             const la_tensor *dev) {
    const char *path = cli_args_get(a, opt);
    if (!path) return 0;
    return save_output(c, opt, path, host, dev);
}

/* Rename every written temporary into place (rc == 0) or remove them all. */
int cli_finish_outputs(cli_state *c, int rc) {
    if (rc == 0) {
        for (int i = 0; i < c->nouts; i++) {
            cli_output *o = &c->outs[i];
            if (!o->written) {
                rc = cli_fail("--%s %s: never written (internal)", o->opt, o->shown);
                break;
            }
        }
    }
    for (int i = 0; rc == 0 && i < c->nouts; i++) {
        cli_output *o = &c->outs[i];
        if (o->direct) continue;
        if (rename(o->tmp, o->path) != 0) {
            int e = errno;
            char done[1024] = "";
            size_t n = 0;
            for (int j = 0; j < i; j++)
                if (c->outs[j].renamed && n < sizeof done - 1)
                    n += (size_t)snprintf(done + n, sizeof done - n, " --%s %s", c->outs[j].opt, c->outs[j].shown);
            fprintf(stderr, "longattn: error: --%s %s: cannot move the result into place: %s; %s%s; this and "
                    "later outputs were not written\n", o->opt, o->shown, strerror(e),
                    n ? "written:" : "no output was written", done);
            rc = 1;
            break;
        }
        o->renamed = 1;
        cli_tmp_release(o->slot);
    }
    for (int i = 0; i < c->nouts; i++) {
        cli_output *o = &c->outs[i];
        if (o->fd >= 0) close(o->fd);
        /* only our own temporaries (created O_EXCL) are ever removed */
        if (o->tmp && !o->renamed) unlink(o->tmp);
        cli_tmp_release(o->slot);
        free_output(o);
    }
    c->nouts = 0;
    return rc;
}

/* ---- text reports (JSON) -------------------------------------------------- */
int cli_text_begin(cli_text *t, const char *opt, const char *path) {
    memset(t, 0, sizeof *t);
    t->opt = opt;
    t->path = path;
    t->slot = -1;
    char *dir = dir_of(path);
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (!dir || !*base) {
        free(dir);
        return cli_fail("--%s %s: expected a file name", opt, path);
    }
    const size_t n = strlen(dir) + strlen(base) + 16;
    t->tmp = (char *)malloc(n);
    if (!t->tmp) {
        free(dir);
        return cli_fail("out of memory");
    }
    snprintf(t->tmp, n, "%s/.%s.XXXXXX", dir, base);
    const int fd = cli_tmp_create(t->tmp, &t->slot);
    if (fd < 0) {
        const int rc = cli_fail("--%s %s: cannot create a file in directory %s: %s", opt, path, dir,
                                strerror(errno));
        free(dir);
        free(t->tmp);
        t->tmp = NULL;
        return rc;
    }
    free(dir);
    mode_t um = umask(0);
    umask(um);
    fchmod(fd, 0666 & ~um);
    t->f = fdopen(fd, "w");
    if (!t->f) {
        close(fd);
        cli_text_abort(t);
        return cli_fail("--%s %s: cannot write: %s", opt, path, strerror(errno));
    }
    return 0;
}

int cli_text_commit(cli_text *t) {
    errno = 0;
    const int werr = ferror(t->f);
    const int cerr = fclose(t->f) != 0;
    t->f = NULL;
    if (werr || cerr || rename(t->tmp, t->path) != 0) {
        const int e = errno;
        cli_text_abort(t);
        return cli_fail("--%s %s: write failed%s%s", t->opt, t->path, e ? ": " : "", e ? strerror(e) : "");
    }
    cli_tmp_release(t->slot);
    t->slot = -1;
    free(t->tmp);
    t->tmp = NULL;
    return 0;
}

void cli_text_abort(cli_text *t) {
    if (t->f) fclose(t->f);
    t->f = NULL;
    if (t->tmp) unlink(t->tmp);
    cli_tmp_release(t->slot);
    t->slot = -1;
    free(t->tmp);
    t->tmp = NULL;
}
