/* echo_server: the benchmark's MCP server, newline-delimited JSON-RPC 2.0 on stdio.
 *
 * Built by scripts/bench (cc -O2) and driven the same way by every client it measures. It
 * is as cheap as a server can be, so what a benchmark shows is the client's cost.
 *
 *   echo_server [--mcpl]
 *
 * Requests it answers (no JSON library: the top-level members of each line are found by a
 * small scanner that skips strings and nested values, so a nested "id" never matches):
 *   initialize          MCP fields, the asked protocolVersion echoed; with --mcpl also
 *                       capabilities.experimental.mcpl = {version 0.5, pushEvents, one
 *                       feature set "bench.flood" using pushEvents} (MCPL handshake).
 *   featureSets/update  {"accepted": true} (the MCPL policy receipt).
 *   ping                {}
 *   tools/list          the tools big, flood and echo.
 *   tools/call big      {"bytes": N}: one result line of exactly N bytes, newline included:
 *                       {"content":[{"type":"text","text":"xxx..."}]}.
 *   tools/call flood    {"count": N}: sends N push/event requests as fast as the pipe takes
 *                       them, counts the answers (a result: accepted, unless it is
 *                       {"accepted": false}; an error or that result: refused) and, once
 *                       all N are answered, answers the call with structuredContent
 *                       {"sent","accepted","refused","seconds"} (seconds: first push to last
 *                       answer, monotonic clock). Ids and eventIds count on across floods,
 *                       so no event is ever a duplicate of an earlier one.
 *   tools/call other    {"content":[{"type":"text","text":"ok"}]}
 *   anything else       its params echoed as the result ({} without params).
 * Notifications are ignored. stdout is non-blocking and buffered; one poll() loop reads and
 * writes, so a flood never stops the server from reading the answers. EOF on stdin: exit 0.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    char *data;
    size_t len, off, cap;
} buffer;

typedef struct {
    const char *start;
    size_t len;
} span;

static buffer out;
static int mcpl;
static long pushes; /* push/event requests sent by this process: their ids and eventIds */

/* The flood in progress: its call's id (raw JSON), counts and start time. */
static struct {
    int active;
    char id[64];
    long count, sent, accepted, refused;
    struct timespec started;
} flood;

static void reserve(buffer *b, size_t more) {
    if (b->off > 0 && b->off == b->len) b->off = b->len = 0;
    if (b->len + more <= b->cap) return;
    if (b->off > 0) { /* compact before growing */
        memmove(b->data, b->data + b->off, b->len - b->off);
        b->len -= b->off;
        b->off = 0;
        if (b->len + more <= b->cap) return;
    }
    size_t cap = b->cap ? b->cap : 65536;
    while (cap < b->len + more) cap *= 2;
    char *data = realloc(b->data, cap);
    if (!data) {
        fprintf(stderr, "echo_server: out of memory\n");
        exit(1);
    }
    b->data = data;
    b->cap = cap;
}

static void put(const char *s, size_t n) {
    reserve(&out, n);
    memcpy(out.data + out.len, s, n);
    out.len += n;
}

static void puts_(const char *s) { put(s, strlen(s)); }

static const char *skip_ws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')) p++;
    return p;
}

/* The end of the JSON value starting at p (p itself when there is none). */
static const char *skip_value(const char *p, const char *end) {
    if (p >= end) return p;
    if (*p == '"') {
        for (p++; p < end; p++) {
            if (*p == '\\') p++;
            else if (*p == '"') return p + 1;
        }
        return end;
    }
    if (*p == '{' || *p == '[') {
        int depth = 0;
        for (; p < end; p++) {
            if (*p == '"') {
                p = skip_value(p, end) - 1;
            } else if (*p == '{' || *p == '[') {
                depth++;
            } else if (*p == '}' || *p == ']') {
                if (--depth == 0) return p + 1;
            }
        }
        return end;
    }
    while (p < end && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\r' && *p != '\n') p++;
    return p;
}

/* The value of the top-level member `key` of the object in [p, end); len 0 when absent. */
static span member(const char *p, const char *end, const char *key) {
    span none = {NULL, 0};
    size_t key_len = strlen(key);
    p = skip_ws(p, end);
    if (p >= end || *p != '{') return none;
    p++;
    for (;;) {
        p = skip_ws(p, end);
        if (p >= end || *p != '"') return none;
        const char *k = p + 1;
        p = skip_value(p, end);
        size_t k_len = (size_t)(p - 1 - k);
        p = skip_ws(p, end);
        if (p >= end || *p != ':') return none;
        p = skip_ws(p + 1, end);
        const char *v = p;
        p = skip_value(p, end);
        if (p == v) return none;
        if (k_len == key_len && memcmp(k, key, key_len) == 0) {
            span found = {v, (size_t)(p - v)};
            return found;
        }
        p = skip_ws(p, end);
        if (p >= end || *p != ',') return none;
        p++;
    }
}

static int is(span s, const char *literal) {
    return s.len == strlen(literal) && memcmp(s.start, literal, s.len) == 0;
}

static long number(span s) {
    char text[32];
    if (s.len == 0 || s.len >= sizeof text) return -1;
    memcpy(text, s.start, s.len);
    text[s.len] = 0;
    return strtol(text, NULL, 10);
}

static void result_head(span id) {
    puts_("{\"jsonrpc\":\"2.0\",\"id\":");
    put(id.start, id.len);
    puts_(",\"result\":");
}

static void answer(span id, const char *result) {
    result_head(id);
    puts_(result);
    puts_("}\n");
}

static void answer_initialize(span id, span params) {
    span version = member(params.start, params.start + params.len, "protocolVersion");
    result_head(id);
    puts_("{\"protocolVersion\":");
    if (version.len && version.start[0] == '"') put(version.start, version.len);
    else puts_("\"2025-11-25\"");
    puts_(",\"capabilities\":{\"tools\":{}");
    if (mcpl)
        puts_(",\"experimental\":{\"mcpl\":{\"version\":\"0.5\",\"pushEvents\":true,\"featureSets\":"
              "{\"bench.flood\":{\"description\":\"the benchmark's push/event flood\","
              "\"uses\":[\"pushEvents\"]}}}}");
    puts_("},\"serverInfo\":{\"name\":\"bench-echo\",\"version\":\"1.0\"}}}\n");
}

static void answer_big(span id, long bytes) {
    static const char tail[] = "\"}]}}\n";
    reserve(&out, id.len + 128); /* so that the head's puts below never move the buffer */
    size_t before = out.len;
    result_head(id);
    puts_("{\"content\":[{\"type\":\"text\",\"text\":\"");
    long text = bytes - (long)(out.len - before) - (long)(sizeof tail - 1);
    if (text < 0) text = 0;
    reserve(&out, (size_t)text + sizeof tail);
    memset(out.data + out.len, 'x', (size_t)text);
    out.len += (size_t)text;
    put(tail, sizeof tail - 1);
}

static void start_flood(span id, long count) {
    if (flood.active || id.len >= sizeof flood.id || count < 1) {
        answer(id, "{\"content\":[{\"type\":\"text\",\"text\":\"flood refused\"}],\"isError\":true}");
        return;
    }
    memcpy(flood.id, id.start, id.len);
    flood.id[id.len] = 0;
    flood.active = 1;
    flood.count = count;
    flood.sent = flood.accepted = flood.refused = 0;
    clock_gettime(CLOCK_MONOTONIC, &flood.started);
}

/* Queue more push/event requests while the output buffer is short. */
static void feed_flood(void) {
    char line[512];
    while (flood.active && flood.sent < flood.count && out.len - out.off < 65536) {
        flood.sent++;
        pushes++;
        int n = snprintf(line, sizeof line,
                         "{\"jsonrpc\":\"2.0\",\"id\":%ld,\"method\":\"push/event\",\"params\":"
                         "{\"featureSet\":\"bench.flood\",\"eventId\":\"e%ld\",\"timestamp\":"
                         "\"2025-01-01T00:00:00Z\",\"payload\":{\"content\":[{\"type\":\"text\","
                         "\"text\":\"event %ld\"}]}}}\n",
                         pushes, pushes, pushes);
        put(line, (size_t)n);
    }
}

static void flood_answered(int refused) {
    if (!flood.active || flood.accepted + flood.refused >= flood.sent) return; /* not ours */
    if (refused) flood.refused++;
    else flood.accepted++;
    if (flood.accepted + flood.refused < flood.count) return;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double seconds = (double)(now.tv_sec - flood.started.tv_sec) + (now.tv_nsec - flood.started.tv_nsec) / 1e9;
    char line[512];
    int n = snprintf(line, sizeof line,
                     "{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":[{\"type\":\"text\",\"text\":"
                     "\"flood done\"}],\"structuredContent\":{\"sent\":%ld,\"accepted\":%ld,\"refused\":%ld,"
                     "\"seconds\":%.6f}}}\n",
                     flood.id, flood.sent, flood.accepted, flood.refused, seconds);
    put(line, (size_t)n);
    flood.active = 0;
}

static void handle_line(const char *line, const char *end) {
    span id = member(line, end, "id");
    span method = member(line, end, "method");
    if (!method.len) { /* a response: the answer to one of our push/event requests */
        if (id.len) {
            /* refused: an error, or a result of {"accepted": false} (MCPL §9.2: a push the
             * host declined, at its delivery timeout say) */
            span result = member(line, end, "result");
            span accepted = result.len ? member(result.start, result.start + result.len, "accepted") : result;
            int declined = accepted.len == 5 && memcmp(accepted.start, "false", 5) == 0;
            flood_answered(member(line, end, "error").len > 0 || declined);
        }
        return;
    }
    if (!id.len) return; /* a notification */
    span params = member(line, end, "params");
    if (is(method, "\"initialize\"")) {
        answer_initialize(id, params);
    } else if (is(method, "\"ping\"")) {
        answer(id, "{}");
    } else if (is(method, "\"featureSets/update\"")) {
        answer(id, "{\"accepted\":true}");
    } else if (is(method, "\"tools/list\"")) {
        answer(id, "{\"tools\":[{\"name\":\"big\",\"inputSchema\":{\"type\":\"object\"}},"
                   "{\"name\":\"flood\",\"inputSchema\":{\"type\":\"object\"}},"
                   "{\"name\":\"echo\",\"inputSchema\":{\"type\":\"object\"}}]}");
    } else if (is(method, "\"tools/call\"")) {
        const char *p = params.start, *q = params.start + params.len;
        span name = member(p, q, "name");
        span arguments = member(p, q, "arguments");
        const char *a = arguments.start, *b = arguments.start + arguments.len;
        if (is(name, "\"big\"")) answer_big(id, number(member(a, b, "bytes")));
        else if (is(name, "\"flood\"")) start_flood(id, number(member(a, b, "count")));
        else answer(id, "{\"content\":[{\"type\":\"text\",\"text\":\"ok\"}]}");
    } else {
        result_head(id);
        if (params.len) put(params.start, params.len);
        else puts_("{}");
        puts_("}\n");
    }
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--mcpl") == 0) mcpl = 1;
        else {
            fprintf(stderr, "usage: echo_server [--mcpl]\n");
            return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    fcntl(1, F_SETFL, fcntl(1, F_GETFL) | O_NONBLOCK);
    buffer in = {0};
    size_t scanned = 0; /* bytes of `in` already searched for a newline */
    for (;;) {
        feed_flood();
        struct pollfd fds[2] = {{0, POLLIN, 0}, {1, out.len > out.off ? POLLOUT : 0, 0}};
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR) continue;
            return 1;
        }
        if (fds[1].revents & (POLLOUT | POLLERR | POLLHUP)) {
            ssize_t n = write(1, out.data + out.off, out.len - out.off);
            if (n < 0 && errno != EAGAIN && errno != EINTR) return 0; /* the client went away */
            if (n > 0) out.off += (size_t)n;
        }
        if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            reserve(&in, 65536);
            ssize_t n = read(0, in.data + in.len, in.cap - in.len);
            if (n == 0) return 0;
            if (n < 0) {
                if (errno == EAGAIN || errno == EINTR) continue;
                return 1;
            }
            in.len += (size_t)n;
            char *start = in.data + in.off;
            char *nl;
            while ((nl = memchr(in.data + in.off + scanned, '\n', in.len - in.off - scanned))) {
                handle_line(start, nl);
                in.off = (size_t)(nl + 1 - in.data);
                start = nl + 1;
                scanned = 0;
            }
            scanned = in.len - in.off;
        }
    }
}
