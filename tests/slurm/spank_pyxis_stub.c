/*
 * spank_pyxis_stub.c - a TEST DOUBLE for NVIDIA pyxis, for the throw-away
 * Slurm cluster of tests/slurm/cluster.sh.  It is not pyxis and runs no
 * container: it accepts pyxis' srun/sbatch options so that generated job
 * scripts (nemo-run, llmb launch scripts) run unchanged, ignores the image,
 * and honours only what makes container paths work on the bare host:
 *
 *   --container-mounts=SRC:DST[:FLAGS][,...]  bind mounts, done in a private
 *        mount namespace of each task (DST is created if missing; FLAGS may
 *        contain "ro"); a bare SRC means SRC:SRC.
 *   --container-workdir=DIR                   working directory of each task.
 *
 * Everything else (--container-image, --container-name, --container-env,
 * --container-writable, --container-remap-root, --no-container-mount-home,
 * ...) is accepted and ignored.
 *
 * Facts this relies on (Slurm 22.05): options must be registered with
 * spank_option_register() in slurm_spank_init (sbatch ignores a static
 * table); their values reach slurmstepd through the option callback in
 * remote context (slurmstepd may deliver the same value twice, so entries are
 * de-duplicated); mounts are done as root in
 * slurm_spank_task_init_privileged; slurmstepd changes directory after that
 * hook, so chdir happens in slurm_spank_task_init.
 *
 * Build: gcc -shared -fPIC -o spank_pyxis_stub.so spank_pyxis_stub.c
 * Load:  "required /path/spank_pyxis_stub.so" in plugstack.conf.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <slurm/spank.h>

SPANK_PLUGIN(pyxis_stub, 1);

#define MAX_MOUNTS 64
#define OPT_MOUNTS 1
#define OPT_WORKDIR 2
#define OPT_IGNORED 3

static char *mounts[MAX_MOUNTS];
static int n_mounts;
static char *workdir;

static int add_mounts(const char *value)
{
	char *copy, *save = NULL, *tok;

	if (!value)
		return 0;
	copy = strdup(value);
	if (!copy)
		return -1;
	for (tok = strtok_r(copy, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		int i, dup = 0;

		if (!*tok)
			continue;
		for (i = 0; i < n_mounts; i++)
			if (!strcmp(mounts[i], tok))
				dup = 1;
		if (dup)
			continue;
		if (n_mounts >= MAX_MOUNTS) {
			slurm_error("pyxis_stub: too many mounts");
			free(copy);
			return -1;
		}
		mounts[n_mounts++] = strdup(tok);
	}
	free(copy);
	return 0;
}

static int opt_cb(int val, const char *optarg, int remote)
{
	(void)remote;
	if (val == OPT_MOUNTS)
		return add_mounts(optarg);
	if (val == OPT_WORKDIR && optarg) {
		free(workdir);
		workdir = strdup(optarg);
	}
	return 0;
}

static struct spank_option opts[] = {
	{ "container-image", "[USER@][REGISTRY#]IMAGE[:TAG]|PATH",
	  "[pyxis stub] accepted, ignored", 1, OPT_IGNORED, opt_cb },
	{ "container-mounts", "SRC:DST[:FLAGS][,SRC:DST...]",
	  "[pyxis stub] bind mounts in a private mount namespace", 1,
	  OPT_MOUNTS, opt_cb },
	{ "container-workdir", "PATH", "[pyxis stub] working directory", 1,
	  OPT_WORKDIR, opt_cb },
	{ "container-env", "NAME[,NAME...]", "[pyxis stub] accepted, ignored",
	  1, OPT_IGNORED, opt_cb },
	{ "container-name", "NAME", "[pyxis stub] accepted, ignored", 1,
	  OPT_IGNORED, opt_cb },
	{ "container-save", "PATH", "[pyxis stub] accepted, ignored", 1,
	  OPT_IGNORED, opt_cb },
	{ "container-mount-home", NULL, "[pyxis stub] accepted, ignored", 0,
	  OPT_IGNORED, opt_cb },
	{ "no-container-mount-home", NULL, "[pyxis stub] accepted, ignored", 0,
	  OPT_IGNORED, opt_cb },
	{ "container-remap-root", NULL, "[pyxis stub] accepted, ignored", 0,
	  OPT_IGNORED, opt_cb },
	{ "no-container-remap-root", NULL, "[pyxis stub] accepted, ignored", 0,
	  OPT_IGNORED, opt_cb },
	{ "container-entrypoint", NULL, "[pyxis stub] accepted, ignored", 0,
	  OPT_IGNORED, opt_cb },
	{ "no-container-entrypoint", NULL, "[pyxis stub] accepted, ignored", 0,
	  OPT_IGNORED, opt_cb },
	{ "container-writable", NULL, "[pyxis stub] accepted, ignored", 0,
	  OPT_IGNORED, opt_cb },
	{ "container-readonly", NULL, "[pyxis stub] accepted, ignored", 0,
	  OPT_IGNORED, opt_cb },
	SPANK_OPTIONS_TABLE_END
};

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	struct spank_option *o;

	(void)ac;
	(void)av;
	for (o = opts; o->name; o++)
		if (spank_option_register(sp, o) != ESPANK_SUCCESS) {
			slurm_error("pyxis_stub: cannot register --%s", o->name);
			return -1;
		}
	return 0;
}

/* mkdir -p PATH (mode 0755). */
static int mkdirs(const char *path)
{
	char buf[4096], *p;

	if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf))
		return -1;
	for (p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0755) && errno != EEXIST)
			return -1;
		*p = '/';
	}
	if (mkdir(buf, 0755) && errno != EEXIST)
		return -1;
	return 0;
}

/* Create DST like SRC (a directory, or an empty file) when it is missing. */
static int make_target(const char *src, const char *dst)
{
	struct stat st;
	char parent[4096], *slash;
	int fd;

	if (stat(dst, &st) == 0)
		return 0;
	if (stat(src, &st) != 0) {
		slurm_error("pyxis_stub: mount source %s: %m", src);
		return -1;
	}
	if (S_ISDIR(st.st_mode)) {
		if (mkdirs(dst))
			goto fail;
		return 0;
	}
	snprintf(parent, sizeof(parent), "%s", dst);
	slash = strrchr(parent, '/');
	if (slash && slash != parent) {
		*slash = '\0';
		if (mkdirs(parent))
			goto fail;
	}
	fd = open(dst, O_CREAT | O_WRONLY, 0644);
	if (fd < 0)
		goto fail;
	close(fd);
	return 0;
fail:
	slurm_error("pyxis_stub: cannot create mount target %s: %m", dst);
	return -1;
}

static int do_mount(const char *spec)
{
	char buf[4096], *src, *dst, *flags;

	snprintf(buf, sizeof(buf), "%s", spec);
	src = buf;
	dst = strchr(src, ':');
	flags = NULL;
	if (dst) {
		*dst++ = '\0';
		flags = strchr(dst, ':');
		if (flags)
			*flags++ = '\0';
	} else {
		dst = src;
	}
	if (*src != '/' || *dst != '/') {
		slurm_error("pyxis_stub: mount %s: paths must be absolute", spec);
		return -1;
	}
	if (make_target(src, dst))
		return -1;
	if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL)) {
		slurm_error("pyxis_stub: bind mount %s on %s: %m", src, dst);
		return -1;
	}
	if (flags && strstr(flags, "ro") &&
	    mount(NULL, dst, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY, NULL)) {
		slurm_error("pyxis_stub: read-only remount of %s: %m", dst);
		return -1;
	}
	slurm_debug("pyxis_stub: mounted %s on %s", src, dst);
	return 0;
}

int slurm_spank_task_init_privileged(spank_t sp, int ac, char **av)
{
	int i;

	(void)ac;
	(void)av;
	if (!spank_remote(sp) || n_mounts == 0)
		return 0;
	if (unshare(CLONE_NEWNS)) {
		slurm_error("pyxis_stub: unshare(CLONE_NEWNS): %m");
		return -1;
	}
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL)) {
		slurm_error("pyxis_stub: making / private: %m");
		return -1;
	}
	for (i = 0; i < n_mounts; i++)
		if (do_mount(mounts[i]))
			return -1;
	return 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (!spank_remote(sp) || !workdir)
		return 0;
	if (chdir(workdir)) {
		slurm_error("pyxis_stub: chdir %s: %m", workdir);
		return -1;
	}
	spank_setenv(sp, "PWD", workdir, 1);
	return 0;
}
