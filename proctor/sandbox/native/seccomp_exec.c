/* seccomp-exec FILTER_FD SOCKET_FD -- ARGV...
 *
 * A link of the chain that starts every student process, run as root inside the sandbox's
 * namespaces just before setpriv drops to the student's uid (as root, no student process can
 * ptrace it before its filter is in): install the harness's seccomp filter, hand the filter's
 * user-notification listener to the harness over SOCKET_FD (SCM_RIGHTS), close both
 * descriptors and exec ARGV (setpriv ... -- the student's command). The filter is inherited by
 * every descendant and cannot be removed;
 * the listener lives in the harness, out of the student's reach, so an attempt the filter
 * refers to the harness is recorded before the syscall returns and cannot be hidden.
 *
 * The filter itself (BPF) is built by proctor/sandbox/syscall_filter.py and read from
 * FILTER_FD, so the policy lives, tested, in one place. Kept tiny and in C: it runs once per
 * student command, and a Python loader would cost tens of milliseconds each time. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int main(int argc, char **argv) {
    if (argc < 5 || strcmp(argv[3], "--") != 0) {
        fprintf(stderr, "usage: proctor-seccomp-exec FILTER_FD SOCKET_FD -- ARGV...\n");
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
    /* Set for the filter's sake (root could do without); setpriv sets it again. */
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return fail("no_new_privs");
    long listener = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
    if (listener < 0) return fail("installing the seccomp filter");
    if (send_fd(sock, (int)listener) != 0) return fail("handing the listener to the harness");
    close((int)listener);
    close(sock);
    free(insns);
    execvp(argv[4], argv + 4);
    int code = errno == ENOENT ? 127 : 126;
    fprintf(stderr, "proctor-seccomp-exec: failed to execute %s: %s\n", argv[4], strerror(errno));
    return code;
}
