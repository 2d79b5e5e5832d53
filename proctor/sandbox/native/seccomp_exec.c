/* seccomp-exec FILTER_FD SOCKET_FD [--as UID] -- ARGV...
 *
 * A link of the chain that starts every student process, run as root inside the sandbox's
 * namespaces (as root, no student process can ptrace it before its filter is in): install the
 * harness's seccomp filter, hand the filter's user-notification listener to the harness over
 * SOCKET_FD (SCM_RIGHTS), close both descriptors, drop to the student (--as UID: uid and gid
 * UID, no supplementary groups, every capability set empty, bounding set and ambient set
 * included, no_new_privs), read every one of those back, and exec ARGV. Without --as, ARGV
 * does the drop itself (setpriv). The filter is inherited by every descendant and cannot be
 * removed;
 * the listener lives in the harness, out of the student's reach, so an attempt the filter
 * refers to the harness is recorded before the syscall returns and cannot be hidden.
 *
 * The filter itself (BPF) is built by proctor/sandbox/syscall_filter.py and read from
 * FILTER_FD, so the policy lives, tested, in one place. Kept tiny and in C: it runs once per
 * student command, and a Python loader would cost tens of milliseconds each time. */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

static int fail(const char *what) {
    fprintf(stderr, "proctor-seccomp-exec: %s: %s\n", what, strerror(errno));
    return 126;
}

static int parse_fd(const char *s) {
    char *end;
    long v = strtol(s, &end, 10);
    return (*s && !*end && v >= 0 && v < 65536) ? (int)v : -1;
}

static int send_fd(int sock, int fd) {
    char byte = 'L';
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    union { struct cmsghdr align; char buf[CMSG_SPACE(sizeof(int))]; } control;
    memset(&control, 0, sizeof control);
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf, .msg_controllen = sizeof control.buf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
    return sendmsg(sock, &msg, MSG_NOSIGNAL) == 1 ? 0 : -1;
}

/* Drop to uid = gid = ID for good, then prove it: a drop that half-failed must never exec. */
static int drop_to(long id) {
    uid_t u = (uid_t)id;
    gid_t g = (gid_t)id;
    if (setgroups(0, NULL) != 0) return fail("clearing the supplementary groups");
    if (setresgid(g, g, g) != 0) return fail("setting the gid");
    int last = 0;
    while (prctl(PR_CAPBSET_READ, last + 1, 0, 0, 0) >= 0) last++;
    for (int cap = 0; cap <= last; cap++)
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) return fail("dropping the bounding set");
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) return fail("clearing the ambient set");
    if (setresuid(u, u, u) != 0) return fail("setting the uid");
    struct __user_cap_header_struct head = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct none[2];
    memset(none, 0, sizeof none);
    if (syscall(SYS_capset, &head, none) != 0) return fail("clearing the capability sets");
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return fail("no_new_privs");
    /* The proof. */
    uid_t ru, eu, su;
    gid_t rg, eg, sg;
    struct __user_cap_data_struct caps[2];
    memset(caps, 0xff, sizeof caps);
    head.version = _LINUX_CAPABILITY_VERSION_3;
    head.pid = 0;
    int ok = getresuid(&ru, &eu, &su) == 0 && ru == u && eu == u && su == u && setfsuid((uid_t)-1) == (int)u
        && getresgid(&rg, &eg, &sg) == 0 && rg == g && eg == g && sg == g && setfsgid((gid_t)-1) == (int)g
        && getgroups(0, NULL) == 0
        && syscall(SYS_capget, &head, caps) == 0
        && !(caps[0].effective | caps[0].permitted | caps[0].inheritable | caps[1].effective | caps[1].permitted | caps[1].inheritable)
        && prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1;
    for (int cap = 0; ok && cap <= last; cap++)
        ok = prctl(PR_CAPBSET_READ, cap, 0, 0, 0) == 0 && prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, cap, 0, 0) == 0;
    if (!ok) {
        fprintf(stderr, "proctor-seccomp-exec: the drop to uid %ld did not hold\n", id);
        return 126;
    }
    return 0;
}

int main(int argc, char **argv) {
    long as = -1;
    int rest = 3;
    if (argc >= 6 && strcmp(argv[3], "--as") == 0) {
        char *end;
        as = strtol(argv[4], &end, 10);
        if (!*argv[4] || *end || as <= 0 || as >= 0xFFFFFFFFL) {
            fprintf(stderr, "proctor-seccomp-exec: bad uid %s\n", argv[4]);
            return 126;
        }
        rest = 5;
    }
    if (argc < rest + 2 || strcmp(argv[rest], "--") != 0) {
        fprintf(stderr, "usage: proctor-seccomp-exec FILTER_FD SOCKET_FD [--as UID] -- ARGV...\n");
        return 126;
    }
    int filter_fd = parse_fd(argv[1]), sock = parse_fd(argv[2]);
    if (filter_fd < 0 || sock < 0) {
        fprintf(stderr, "proctor-seccomp-exec: bad descriptor numbers %s %s\n", argv[1], argv[2]);
        return 126;
    }
    struct stat st;
    if (fstat(filter_fd, &st) != 0) return fail("filter descriptor");
    size_t size = (size_t)st.st_size;
    if (size == 0 || size % sizeof(struct sock_filter) != 0 || size > BPF_MAXINSNS * sizeof(struct sock_filter)) {
        fprintf(stderr, "proctor-seccomp-exec: filter of %zu bytes is not a BPF program\n", size);
        return 126;
    }
    struct sock_filter *insns = malloc(size);
    if (!insns || pread(filter_fd, insns, size, 0) != (ssize_t)size) return fail("reading the filter");
    close(filter_fd);
    struct sock_fprog prog = {.len = (unsigned short)(size / sizeof(struct sock_filter)), .filter = insns};
    /* Set for the filter's sake (root could do without); the drop checks it again. */
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return fail("no_new_privs");
    long listener = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
    if (listener < 0) return fail("installing the seccomp filter");
    if (send_fd(sock, (int)listener) != 0) return fail("handing the listener to the harness");
    close((int)listener);
    close(sock);
    free(insns);
    if (as > 0) {
        int failed = drop_to(as);
        if (failed) return failed;
    }
    execvp(argv[rest + 1], argv + rest + 1);
    int code = errno == ENOENT ? 127 : 126;
    fprintf(stderr, "proctor-seccomp-exec: failed to execute %s: %s\n", argv[rest + 1], strerror(errno));
    return code;
}
