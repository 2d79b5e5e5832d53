/* clear-keys UID
 *
 * Kernel keyrings are host state, not namespaced: a key a sandbox uid links into its user,
 * user-session or persistent keyring outlives every process of that uid, is listed in
 * /proc/key-users and could be read by whoever gets the uid next. Run as root at teardown and
 * reclaim: become UID (no seccomp filter here, so keyctl works), invalidate every key reachable
 * from those keyrings and every other key of UID this process can see, then the keyrings
 * themselves. Invalidated keys are garbage-collected at once (revoked ones would linger).
 * Prints how many keys it invalidated. */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define KEYCTL_GET_KEYRING_ID 0
#define KEYCTL_CLEAR 7
#define KEYCTL_READ 11
#define KEYCTL_GET_PERSISTENT 22
#define KEYCTL_INVALIDATE 21
#define KEY_SPEC_PROCESS_KEYRING -2
#define KEY_SPEC_USER_KEYRING -4
#define KEY_SPEC_USER_SESSION_KEYRING -5

static long keyctl(int op, long a, long b, long c) { return syscall(SYS_keyctl, op, a, b, c, 0); }

static int invalidated;

static void invalidate(long key) {
    if (keyctl(KEYCTL_INVALIDATE, key, 0, 0) == 0) invalidated++;
}

/* Invalidate what `ring` links (depth-first into nested keyrings), then clear it. The keyrings
 * are possessed by this process, so the possessor's permissions apply. */
static void empty_ring(long ring, int depth) {
    int32_t ids[4096];
    long n = keyctl(KEYCTL_READ, ring, (long)ids, sizeof ids);
    if (n > 0) {
        long count = (n > (long)sizeof ids ? (long)sizeof ids : n) / (long)sizeof(int32_t);
        for (long i = 0; i < count; i++) {
            if (depth < 8) empty_ring(ids[i], depth + 1);
            invalidate(ids[i]);
        }
    }
    keyctl(KEYCTL_CLEAR, ring, 0, 0);
}

int main(int argc, char **argv) {
    char *end;
    long uid = argc == 2 ? strtol(argv[1], &end, 10) : -1;
    if (argc != 2 || *end || uid <= 0 || uid > 0xfffffffeL) {
        fprintf(stderr, "usage: proctor-clear-keys UID (not root)\n");
        return 2;
    }
    if (setgroups(0, NULL) != 0 || setresgid(uid, uid, uid) != 0 || setresuid(uid, uid, uid) != 0) {
        fprintf(stderr, "proctor-clear-keys: cannot become uid %ld: %s\n", uid, strerror(errno));
        return 1;
    }
    /* Asking for these keyrings creates them if missing; they are invalidated below too. */
    long rings[3] = {
        keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_KEYRING, 1, 0),
        keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_SESSION_KEYRING, 1, 0),
        keyctl(KEYCTL_GET_PERSISTENT, -1, KEY_SPEC_PROCESS_KEYRING, 0),
    };
    for (int i = 0; i < 3; i++)
        if (rings[i] > 0) empty_ring(rings[i], 0);
    /* The persistent keyring first: it is possessed only through this process's keyring, which
     * the sweep below invalidates too. */
    for (int i = 2; i >= 0; i--)
        if (rings[i] > 0) invalidate(rings[i]);
    /* Keys of this uid linked elsewhere (e.g. into another uid's keyring) that it can still see. */
    FILE *f = fopen("/proc/keys", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f)) {
            unsigned long serial;
            char flags[16], usage[16], timeout[16], perm[16];
            long owner;
            if (sscanf(line, "%lx %15s %15s %15s %15s %ld", &serial, flags, usage, timeout, perm, &owner) == 6 && owner == uid)
                invalidate((long)serial);
        }
        fclose(f);
    }
    printf("%d\n", invalidated);
    return 0;
}
