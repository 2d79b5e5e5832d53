// What seccomp user notification on path syscalls would cost (the kernel-seen alternative to the
// text-based hidden_path_probe, docs/redteam.md "How the detectors decide"). The supervisor reads each
// path from the target's memory, as a detector would, and lets the syscall continue.
//   gcc -O2 -o /tmp/unotify_cost bench/unotify_cost.c && /tmp/unotify_cost git status --short
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <poll.h>

static int nr_path[] = {SYS_open, SYS_openat, SYS_stat, SYS_lstat, SYS_newfstatat, SYS_statx, SYS_access, SYS_faccessat, SYS_readlink, SYS_readlinkat, SYS_openat2, SYS_execve};
#define N (int)(sizeof nr_path / sizeof nr_path[0])

int main(int argc, char **argv) {
    int sv[2]; pipe(sv); int go[2]; pipe(go);
    pid_t child = fork();
    if (child == 0) {
        struct sock_filter f[4 + 2 * N];
        int i = 0;
        f[i++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
        for (int k = 0; k < N; k++) {
            f[i++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, nr_path[k], 0, 1);
            f[i++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF);
        }
        f[i++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
        struct sock_fprog prog = {.len = i, .filter = f};
        prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
        int fd = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
        if (fd < 0) { perror("seccomp"); _exit(1); }
        write(sv[1], &fd, sizeof fd);
        char c; read(go[0], &c, 1);
        execvp(argv[1], argv + 1);
        _exit(127);
    }
    int cfd; read(sv[0], &cfd, sizeof cfd);
    int pidfd = syscall(SYS_pidfd_open, child, 0);
    int fd = syscall(SYS_pidfd_getfd, pidfd, cfd, 0);
    if (fd < 0) { perror("pidfd_getfd"); return 1; }
    struct seccomp_notif_sizes sz; syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sz);
    struct seccomp_notif *req = calloc(1, sz.seccomp_notif);
    struct seccomp_notif_resp *resp = calloc(1, sz.seccomp_notif_resp);
    struct timespec t0, t1; clock_gettime(CLOCK_MONOTONIC, &t0);
    write(go[1], "x", 1);
    long n = 0; char path[4096]; char memf[64];
    for (;;) {
        struct pollfd p[2] = {{fd, POLLIN, 0}, {pidfd, POLLIN, 0}};
        poll(p, 2, -1);
        if (p[0].revents & POLLIN) {
            memset(req, 0, sz.seccomp_notif);
            if (ioctl(fd, SECCOMP_IOCTL_NOTIF_RECV, req) < 0) continue;
            int arg = (req->data.nr == SYS_openat || req->data.nr == SYS_newfstatat || req->data.nr == SYS_statx || req->data.nr == SYS_faccessat || req->data.nr == SYS_readlinkat || req->data.nr == SYS_openat2) ? 1 : 0;
            snprintf(memf, sizeof memf, "/proc/%d/mem", req->pid);
            int m = open(memf, O_RDONLY);
            if (m >= 0) { pread(m, path, 256, req->data.args[arg]); close(m); }
            n++;
            memset(resp, 0, sz.seccomp_notif_resp);
            resp->id = req->id; resp->flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
            ioctl(fd, SECCOMP_IOCTL_NOTIF_SEND, resp);
        } else if (p[1].revents & POLLIN) break;
    }
    int st; waitpid(child, &st, 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    fprintf(stderr, "notified=%ld wall_ms=%.1f\n", n, (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6);
    return 0;
}
