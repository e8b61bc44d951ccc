/* Benchmark load for bench/firewall (never part of the data path): small UDP datagrams as fast
 * as one sender can push them, and a receiver that counts what arrives.
 *
 *   udpflood send --host H --port P --seconds S [--size B] [--batch N]
 *       sendmmsg() of N datagrams of B bytes (default 18, 64) per call until S seconds passed;
 *       prints {"sent": N, "seconds": S}.
 *   udpflood recv --port P --seconds S [--warmup W]
 *       recvmmsg() on P; counts the datagrams of the S seconds that follow the first W seconds
 *       after the first datagram (default 0.5); prints {"received": N, "seconds": S, "pps": R}.
 *       Gives up (received 0) when nothing arrives within 10 s.
 *
 * The packets are what the firewall classifies; the sizes are the smallest a CTF service sees,
 * so the per-packet costs (syscalls, veth, the rules) dominate, not the bytes. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BATCH_MAX 256
#define SIZE_MAX_B 1400

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const char *arg(int argc, char **argv, const char *name, const char *def)
{
    for (int i = 2; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return argv[i + 1];
    return def;
}

static int do_send(const char *host, int port, double secs, int size, int batch)
{
    static char buf[SIZE_MAX_B];
    struct mmsghdr msgs[BATCH_MAX];
    struct iovec iov[BATCH_MAX];
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    unsigned long long sent = 0;
    double t0, end;
    int fd = socket(AF_INET, SOCK_DGRAM, 0);

    if (fd == -1 || inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        perror("udpflood send");
        return 1;
    }
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == -1) {
        perror("udpflood connect");
        return 1;
    }
    memset(buf, 'x', sizeof(buf));
    memset(msgs, 0, sizeof(msgs));
    for (int i = 0; i < batch; i++) {
        iov[i].iov_base = buf;
        iov[i].iov_len = (size_t)size;
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    t0 = now_s();
    end = t0 + secs;
    while (now_s() < end) {
        int n = sendmmsg(fd, msgs, (unsigned)batch, 0);

        if (n == -1) {
            /* a full queue or an ICMP error from an earlier datagram: go on */
            if (errno == ENOBUFS || errno == EAGAIN || errno == ECONNREFUSED || errno == EPERM)
                continue;
            perror("udpflood sendmmsg");
            return 1;
        }
        sent += (unsigned)n;
    }
    printf("{\"sent\": %llu, \"seconds\": %.3f}\n", sent, now_s() - t0);
    close(fd);
    return 0;
}

static int do_recv(int port, double secs, double warmup)
{
    static char bufs[BATCH_MAX][2048];
    struct mmsghdr msgs[BATCH_MAX];
    struct iovec iov[BATCH_MAX];
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    unsigned long long got = 0;
    double first = 0, t_start = 0, t_end = 0;
    int fd = socket(AF_INET, SOCK_DGRAM, 0), rcvbuf = 8 << 20;
    struct pollfd pfd = {.fd = fd, .events = POLLIN};

    if (fd == -1 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == -1) {
        perror("udpflood recv");
        return 1;
    }
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf));
    for (int i = 0; i < BATCH_MAX; i++) {
        iov[i].iov_base = bufs[i];
        iov[i].iov_len = sizeof(bufs[i]);
        memset(&msgs[i], 0, sizeof(msgs[i]));
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    printf("{\"ready\": true}\n");
    fflush(stdout);
    for (;;) {
        double t;
        int n;

        if (poll(&pfd, 1, first == 0 ? 10000 : 200) <= 0) {
            if (first == 0)
                break;
        }
        n = recvmmsg(fd, msgs, BATCH_MAX, MSG_DONTWAIT, NULL);
        t = now_s();
        if (n > 0 && first == 0) {
            first = t;
            t_start = first + warmup;
            t_end = t_start + secs;
        }
        if (first != 0 && t >= t_end)
            break;
        if (n > 0 && t >= t_start)
            got += (unsigned)n;
    }
    if (first == 0) {
        printf("{\"received\": 0, \"seconds\": 0, \"pps\": 0}\n");
        return 0;
    }
    printf("{\"received\": %llu, \"seconds\": %.3f, \"pps\": %.0f}\n", got, secs,
           (double)got / secs);
    close(fd);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "send") == 0) {
        int size = atoi(arg(argc, argv, "--size", "18"));
        int batch = atoi(arg(argc, argv, "--batch", "64"));

        if (size < 1 || size > SIZE_MAX_B || batch < 1 || batch > BATCH_MAX) {
            fprintf(stderr, "udpflood: --size 1..%d, --batch 1..%d\n", SIZE_MAX_B, BATCH_MAX);
            return 2;
        }
        return do_send(arg(argc, argv, "--host", "127.0.0.1"),
                       atoi(arg(argc, argv, "--port", "9")),
                       atof(arg(argc, argv, "--seconds", "5")), size, batch);
    }
    if (argc >= 2 && strcmp(argv[1], "recv") == 0)
        return do_recv(atoi(arg(argc, argv, "--port", "9")),
                       atof(arg(argc, argv, "--seconds", "5")),
                       atof(arg(argc, argv, "--warmup", "0.5")));
    fprintf(stderr, "usage: udpflood send --host H --port P --seconds S [--size B] [--batch N]\n"
                    "       udpflood recv --port P --seconds S [--warmup W]\n");
    return 2;
}
