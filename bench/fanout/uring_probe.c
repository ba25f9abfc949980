/*
 * uring_probe: is io_uring (one submission per frame for every terminal's send) cheaper than the
 * send loop of _sendmany.c on this kernel? Issue 13 asks to measure it and ship it only if it
 * beats the loop by a clear margin. Not part of the node: a standalone probe, raw syscalls (no
 * liburing on these machines), run by hand:
 *
 *   cc -O2 -Wall -Wextra -Werror -o /tmp/uring_probe bench/fanout/uring_probe.c -lpthread
 *   /tmp/uring_probe CONNECTIONS FRAMES   (e.g. 1000 400)
 *
 * N TCP connections on 127.0.0.1 (the server side TCP_NODELAY and non-blocking, as asyncio sets
 * them), a reader thread on CPU 1 draining every client socket, the sender on CPU 0. Per frame
 * the same 122-byte payload (monotape's median frame) to every connection, frames 2 ms apart,
 * alternating the two ways frame by frame so drift hits both: (a) a loop of send(MSG_DONTWAIT |
 * MSG_NOSIGNAL), (b) io_uring: one IORING_OP_SEND SQE per connection, one io_uring_enter that
 * submits them all and waits for every completion. Prints the sender thread's CPU (and the
 * process's, for any kernel worker the ring might use) per delivered send, medians over frames.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/io_uring.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define PAYLOAD 122
#define SEND_FLAGS (MSG_DONTWAIT | MSG_NOSIGNAL)

static int *client_fds;
static int nconn;
static atomic_int stop_reader;

static void
pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof(set), &set);
}

static void *
reader(void *arg)
{
    (void)arg;
    pin(1);
    int ep = epoll_create1(0);
    for (int i = 0; i < nconn; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.fd = client_fds[i]};
        epoll_ctl(ep, EPOLL_CTL_ADD, client_fds[i], &ev);
    }
    static char buf[1 << 16];
    struct epoll_event evs[256];
    while (!atomic_load(&stop_reader)) {
        int n = epoll_wait(ep, evs, 256, 50);
        for (int k = 0; k < n; k++) {
            while (recv(evs[k].data.fd, buf, sizeof(buf), MSG_DONTWAIT) > 0) {
            }
        }
    }
    close(ep);
    return NULL;
}

static double
cpu_now(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

struct ring {
    int fd;
    unsigned *sq_head, *sq_tail, *sq_mask, *sq_array;
    unsigned *cq_head, *cq_tail, *cq_mask;
    struct io_uring_sqe *sqes;
    struct io_uring_cqe *cqes;
    unsigned entries;
};

static int
ring_setup(struct ring *r, unsigned entries)
{
    struct io_uring_params p;
    memset(&p, 0, sizeof(p));
    p.flags = IORING_SETUP_CQSIZE;
    p.cq_entries = entries * 2;
    r->fd = (int)syscall(__NR_io_uring_setup, entries, &p);
    if (r->fd < 0) {
        return -1;
    }
    r->entries = p.sq_entries;
    size_t sq_len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    size_t cq_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    if (p.features & IORING_FEAT_SINGLE_MMAP) {
        sq_len = cq_len = sq_len > cq_len ? sq_len : cq_len;
    }
    char *sq = mmap(NULL, sq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd,
                    IORING_OFF_SQ_RING);
    char *cq = (p.features & IORING_FEAT_SINGLE_MMAP)
                   ? sq
                   : mmap(NULL, cq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                          r->fd, IORING_OFF_CQ_RING);
    r->sqes = mmap(NULL, p.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_SQES);
    if (sq == MAP_FAILED || cq == MAP_FAILED || r->sqes == MAP_FAILED) {
        return -1;
    }
    r->sq_head = (unsigned *)(sq + p.sq_off.head);
    r->sq_tail = (unsigned *)(sq + p.sq_off.tail);
    r->sq_mask = (unsigned *)(sq + p.sq_off.ring_mask);
    r->sq_array = (unsigned *)(sq + p.sq_off.array);
    r->cq_head = (unsigned *)(cq + p.cq_off.head);
    r->cq_tail = (unsigned *)(cq + p.cq_off.tail);
    r->cq_mask = (unsigned *)(cq + p.cq_off.ring_mask);
    r->cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
    return 0;
}

/* Sends to fds[0..n) through the ring, in batches of the ring's size; returns short sends. */
static int
ring_send_all(struct ring *r, const int *fds, int n, const char *buf)
{
    int shorts = 0;
    for (int base = 0; base < n; base += (int)r->entries) {
        int batch = n - base < (int)r->entries ? n - base : (int)r->entries;
        unsigned tail = *r->sq_tail;
        for (int i = 0; i < batch; i++) {
            unsigned idx = tail & *r->sq_mask;
            struct io_uring_sqe *sqe = &r->sqes[idx];
            memset(sqe, 0, sizeof(*sqe));
            sqe->opcode = IORING_OP_SEND;
            sqe->fd = fds[base + i];
            sqe->addr = (uint64_t)(uintptr_t)buf;
            sqe->len = PAYLOAD;
            sqe->msg_flags = SEND_FLAGS;
            sqe->user_data = (uint64_t)(base + i);
            r->sq_array[idx] = idx;
            tail++;
        }
        atomic_store_explicit((_Atomic unsigned *)r->sq_tail, tail, memory_order_release);
        int got = (int)syscall(__NR_io_uring_enter, r->fd, batch, batch, IORING_ENTER_GETEVENTS,
                               NULL, 0);
        if (got < 0) {
            perror("io_uring_enter");
            exit(1);
        }
        unsigned head = *r->cq_head;
        int seen = 0;
        while (seen < batch) {
            unsigned ctail =
                atomic_load_explicit((_Atomic unsigned *)r->cq_tail, memory_order_acquire);
            while (head != ctail) {
                struct io_uring_cqe *cqe = &r->cqes[head & *r->cq_mask];
                shorts += cqe->res != PAYLOAD;
                head++;
                seen++;
            }
        }
        atomic_store_explicit((_Atomic unsigned *)r->cq_head, head, memory_order_release);
    }
    return shorts;
}

static int
cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int
main(int argc, char **argv)
{
    nconn = argc > 1 ? atoi(argv[1]) : 1000;
    int frames = argc > 2 ? atoi(argv[2]) : 400;
    struct rlimit rl = {65536, 65536};
    setrlimit(RLIMIT_NOFILE, &rl);
    int lst = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(addr);
    if (bind(lst, (struct sockaddr *)&addr, sizeof(addr)) < 0 || listen(lst, 4096) < 0) {
        perror("listen");
        return 1;
    }
    getsockname(lst, (struct sockaddr *)&addr, &alen);
    client_fds = calloc((size_t)nconn, sizeof(int));
    int *server_fds = calloc((size_t)nconn, sizeof(int));
    for (int i = 0; i < nconn; i++) {
        client_fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(client_fds[i], (struct sockaddr *)&addr, sizeof(addr)) < 0) {
            perror("connect");
            return 1;
        }
        server_fds[i] = accept(lst, NULL, NULL);
        int one = 1;
        setsockopt(server_fds[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    pthread_t th;
    pthread_create(&th, NULL, reader, NULL);
    pin(0);
    struct ring ring;
    if (ring_setup(&ring, 4096) < 0) {
        printf("io_uring unavailable: %s\n", strerror(errno));
        return 0;
    }
    char buf[PAYLOAD];
    memset(buf, 0x5a, sizeof(buf));
    double *loop_us = calloc((size_t)frames, sizeof(double));
    double *ring_us = calloc((size_t)frames, sizeof(double));
    double proc_loop = 0, proc_ring = 0;
    long short_loop = 0, short_ring = 0;
    struct timespec gap = {0, 2000000};
    for (int f = 0; f < 2 * frames; f++) {
        int use_ring = f & 1;
        double p0 = cpu_now(CLOCK_PROCESS_CPUTIME_ID);
        double t0 = cpu_now(CLOCK_THREAD_CPUTIME_ID);
        if (use_ring) {
            short_ring += ring_send_all(&ring, server_fds, nconn, buf);
        } else {
            for (int i = 0; i < nconn; i++) {
                ssize_t r = send(server_fds[i], buf, PAYLOAD, SEND_FLAGS);
                short_loop += r != PAYLOAD;
            }
        }
        double t1 = cpu_now(CLOCK_THREAD_CPUTIME_ID);
        double p1 = cpu_now(CLOCK_PROCESS_CPUTIME_ID);
        (use_ring ? ring_us : loop_us)[f / 2] = (t1 - t0) / 1e3 / nconn;
        *(use_ring ? &proc_ring : &proc_loop) += (p1 - p0) / 1e3 / nconn;
        nanosleep(&gap, NULL);
    }
    atomic_store(&stop_reader, 1);
    pthread_join(th, NULL);
    qsort(loop_us, (size_t)frames, sizeof(double), cmp);
    qsort(ring_us, (size_t)frames, sizeof(double), cmp);
    printf("connections %d frames %d each\n", nconn, frames);
    printf("send loop: %.3f us/send median thread CPU (process %.3f mean), %ld short\n",
           loop_us[frames / 2], proc_loop / frames, short_loop);
    printf("io_uring : %.3f us/send median thread CPU (process %.3f mean), %ld short\n",
           ring_us[frames / 2], proc_ring / frames, short_ring);
    printf("io_uring / loop: %.2f\n", ring_us[frames / 2] / loop_us[frames / 2]);
    return 0;
}
