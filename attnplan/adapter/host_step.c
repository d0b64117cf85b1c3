/* The step metadata's host arithmetic in one pass over the requests (issue 41).

   attnplan/adapter/host_metadata.py ``from_host`` works out, for a prefill or mixed step, every per-token
   and per-page array the planned kernels take and writes them into one pinned staging buffer; in numpy
   that is ~30 calls of ~1 us each plus their Python (35 us a step on the development machine, 3-5x that
   on the H100 machine's host: bench/logs/h100-2026-11-26r/call3/prof_meta.log). Here it is one call,
   ap_step: the step's checks (the query lengths, KV shorter than a query, a request longer than its table
   row), its counts, the sizes of the layout's parts and, where the caller's buffer holds them, the parts
   themselves. The layout is host_metadata.py's, written byte for byte as its numpy path writes it
   (tests/test_host_step_native.py holds the two equal over random steps); a change to one is a change to
   both.

   Compiled on first use by host_native.py (cc -O2 -shared -fPIC), loaded with ctypes; without a compiler
   the numpy path runs. Plain C99 that g++ compiles as well. */

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped with any change of a signature or of the layout: host_native.py checks it at load. */
int64_t ap_abi(void) { return 5; }

static inline int64_t seq_at(const void *seq, int64_t seq_is64, int64_t r) {
    return seq_is64 ? ((const int64_t *)seq)[r] : (int64_t)((const int32_t *)seq)[r];
}

/* info[0] new tokens, info[1] KV pages, info[2] longest KV length, info[3] the KV pages of the first nd
   (decode) requests. Returns -1, or the first request whose KV length is shorter than its query length
   (host_metadata.py raises on it). */
static int64_t measure(const int64_t *q, const void *seq, int64_t seq_is64, int64_t b, int64_t nd, int64_t page,
                       int64_t *info) {
    int64_t t = 0, p = 0, mx = 0, bad = -1, p_dec = 0;
    for (int64_t r = 0; r < b; r++) {
        int64_t s = seq_at(seq, seq_is64, r);
        if (s < q[r] && bad < 0)
            bad = r;
        if (r == nd)
            p_dec = p;
        t += q[r];
        p += (s + page - 1) / page;
        if (s > mx)
            mx = s;
    }
    info[0] = t;
    info[1] = p;
    info[2] = mx;
    info[3] = nd < b ? p_dec : p;
    return bad;
}

/* Writes host_metadata.py's layout into h (int32; 8-byte aligned):
     bt == NULL: block-table entry of each new token [T], of each KV page [p_host] | each new token's
                 offset in its page [T]
     bt != NULL: each new token's slot, int64 [T] (2T int32) | its page [T] | its offset in the page [T] |
                 each KV page's index [p_host]
   then per phase present (decode = requests [0, nd), prefill = [nd, b)): qo indptr from 0 [n + 1];
   per phase: KV page indptr from 0 [n + 1]; seq lens [b]; last page lens [b]; kv_device: each request's
   first entry minus its page offset [b] and its page count [b].
   info[3] the decode phase's tokens, info[4] its pages, info[5..6] its longest query and KV,
   info[7..8] the prefill phase's. */
static void fill(const int64_t *q, const void *seq, int64_t seq_is64, int64_t b, int64_t nd, int64_t page,
                 int64_t width, int64_t t_all, int64_t p_host, int64_t kv_device, const int32_t *bt, int32_t *h,
                 int64_t *info) {
    int32_t *entry = h, *kv = h + t_all, *off = h + t_all + p_host;
    int64_t *slots = (int64_t *)h;
    int32_t *tpage = h + 2 * t_all, *toff = h + 3 * t_all, *pidx = h + 4 * t_all;
    int64_t tok = 0, pg = 0;
    int64_t t_dec = 0, p_dec = 0, mq[2] = {0, 0}, mk[2] = {0, 0};
    for (int64_t r = 0; r < b; r++) {
        int64_t s = seq_at(seq, seq_is64, r), n = q[r], row = r * width;
        int64_t pages = (s + page - 1) / page;
        int ph = r >= nd;
        if (r == nd) {
            t_dec = tok;
            p_dec = pg;
        }
        if (n > mq[ph])
            mq[ph] = n;
        if (s > mk[ph])
            mk[ph] = s;
        /* new token j of request r sits at KV position s - n + j: entry row + pos / page, offset pos % page;
           walked a page at a time (no division per token) */
        int64_t pos = s - n, e = row + pos / page, o = pos % page;
        for (int64_t j = 0; j < n;) {
            int64_t run = page - o < n - j ? page - o : n - j;
            if (bt == NULL) {
                for (int64_t k = 0; k < run; k++) {
                    entry[tok + k] = (int32_t)e;
                    off[tok + k] = (int32_t)(o + k);
                }
            } else {
                int64_t base = (int64_t)bt[e] * page + o;
                for (int64_t k = 0; k < run; k++) {
                    slots[tok + k] = base + k;
                    tpage[tok + k] = bt[e];
                    toff[tok + k] = (int32_t)(o + k);
                }
            }
            tok += run;
            j += run;
            e += 1;
            o = 0;
        }
        if (p_host) {                     /* page k of request r: entry row + k */
            if (bt == NULL)
                for (int64_t k = 0; k < pages; k++)
                    kv[pg + k] = (int32_t)(row + k);
            else
                for (int64_t k = 0; k < pages; k++)
                    pidx[pg + k] = bt[row + k];
        }
        pg += pages;
    }
    if (nd == b) {
        t_dec = tok;
        p_dec = pg;
    }
    int32_t *w = h + (bt == NULL ? 2 : 4) * t_all + p_host;
    int64_t lo[2] = {0, nd}, hi[2] = {nd, b};
    for (int part = 0; part < 2; part++) {          /* qo indptrs, then KV page indptrs, per phase */
        for (int ph = 0; ph < 2; ph++) {
            if (hi[ph] <= lo[ph])
                continue;
            int64_t acc = 0;
            *w++ = 0;
            for (int64_t r = lo[ph]; r < hi[ph]; r++) {
                acc += part == 0 ? q[r] : (seq_at(seq, seq_is64, r) + page - 1) / page;
                *w++ = (int32_t)acc;
            }
        }
    }
    for (int64_t r = 0; r < b; r++)
        w[r] = (int32_t)seq_at(seq, seq_is64, r);
    for (int64_t r = 0; r < b; r++)
        w[b + r] = (int32_t)((seq_at(seq, seq_is64, r) - 1) % page + 1);
    if (kv_device) {
        int64_t acc = 0;
        for (int64_t r = 0; r < b; r++) {
            int64_t pages = (seq_at(seq, seq_is64, r) + page - 1) / page;
            w[2 * b + r] = (int32_t)(r * width - acc);
            w[3 * b + r] = (int32_t)pages;
            acc += pages;
        }
    }
    info[3] = t_dec;
    info[4] = p_dec;
    info[5] = mq[0];
    info[6] = mk[0];
    info[7] = mq[1];
    info[8] = mk[1];
}

/* MLA's chunked prefill (attnplan/adapter/executor.py _plan_mla_prefill): for the prefill requests [nd, b),
   each one's query length [n] (the ragged new part's KV lengths), its cached context (KV length minus query
   length) [n], the context's indptr from 0 [n + 1], and one byte per prefill token - 1 where its request has
   context - in (T_prefill + 3) / 4 int32s, the padding zero. info[30] the context tokens, info[31] the longest
   context. Written only where some prefill request has context (ap_step). */
static void fill_context(const int64_t *q, const void *seq, int64_t seq_is64, int64_t b, int64_t nd,
                         int32_t *h, int64_t *info) {
    int64_t n = b - nd, acc = 0, mx = 0, tok = 0;
    int32_t *qlen = h, *lens = h + n, *ptr = h + 2 * n;
    uint8_t *has = (uint8_t *)(h + 3 * n + 1);
    ptr[0] = 0;
    for (int64_t r = nd; r < b; r++) {
        int64_t c = seq_at(seq, seq_is64, r) - q[r];
        qlen[r - nd] = (int32_t)q[r];
        lens[r - nd] = (int32_t)c;
        acc += c;
        ptr[r - nd + 1] = (int32_t)acc;
        if (c > mx)
            mx = c;
        for (int64_t j = 0; j < q[r]; j++)
            has[tok + j] = c > 0;
        tok += q[r];
    }
    for (; tok % 4; tok++)
        has[tok] = 0;
    info[30] = acc;
    info[31] = mx;
}

/* One step. info[32..41] in: requests, decode requests, a decode's query length (q_dec), the page size, the
   table's width, kv_needed, host_kv_max, whether seq is int64, the int32 capacity of h. Returns < 0 where the
   step is refused - -1 a decode request whose query length is not q_dec
   (info[0] the first), -2 a request without query tokens (info[0] the first), -3 a request whose KV length
   is shorter than its query length (info[0] the first), -4 a request longer than its table row (info[0] the
   longest KV length) - in the order host_metadata.py checks them; else the layout's int32 count, written
   into h where that is at most cap (else nothing is written: the caller takes a larger buffer and calls
   again). kv_needed: the plan takes page indices; host_kv_max: up to this many pages the host works them
   out, past it the device expands them (HOST_KV_ENTRIES); bt: the engine's host block table or NULL, used
   unless the device expands. info on success: [0] new tokens, [1] KV pages, [2] page indices on the host,
   [3] on the device, [4] the host table used, [5] the decode phase's tokens, [6] its pages, [7..8] its
   longest query and KV, [9..10] the prefill phase's, [11] the number of parts, [12..] their int32 sizes:
   the token parts (no host table: [T + P_host] [T]; with it: [2T] [T] [T] then each phase's page indices), then
   per phase qo indptrs, KV page indptrs, seq lens, last page lens, then, expanded on the device, [b] [b], then
   with mla_context and a prefill request with cached context, fill_context's four parts; [30..31]
   fill_context's counts (at most 17 sizes: [12, 29) never reaches them). */
int64_t ap_step(const int64_t *q, const void *seq, const int32_t *bt, int32_t *h, int64_t *info) {
    /* the inputs, after the outputs' room (one pointer instead of nine ints: ctypes converts each argument) */
    int64_t b = info[32], nd = info[33], q_dec = info[34], page = info[35], width = info[36];
    int64_t kv_needed = info[37], host_kv_max = info[38], seq_is64 = info[39], cap = info[40], mla_ctx = info[41];
    for (int64_t r = 0; r < nd; r++)
        if (q[r] != q_dec) {
            info[0] = r;
            return -1;
        }
    for (int64_t r = 0; r < b; r++)
        if (q[r] < 1) {
            info[0] = r;
            return -2;
        }
    int64_t m3[4];
    int64_t bad = measure(q, seq, seq_is64, b, nd, page, m3);
    if (bad >= 0) {
        info[0] = bad;
        return -3;
    }
    int64_t t_all = m3[0], p_all = m3[1];
    if ((m3[2] + page - 1) / page > width) {
        info[0] = m3[2];
        return -4;
    }
    int64_t p_dec = m3[3];
    int64_t on_host = kv_needed && p_all <= host_kv_max, on_device = kv_needed && !on_host;
    int64_t use_bt = bt != NULL && !on_device, p_host = on_host ? p_all : 0;
    int64_t n_k[2], m = 0, *sz = info + 12, k = 0, total = 0;
    if (nd > 0)
        n_k[m++] = nd;
    if (b > nd)
        n_k[m++] = b - nd;
    if (!use_bt) {
        sz[k++] = t_all + p_host;
        sz[k++] = t_all;
    } else {
        sz[k++] = 2 * t_all;
        sz[k++] = t_all;
        sz[k++] = t_all;
        if (m == 2) {
            sz[k++] = on_host ? p_dec : 0;
            sz[k++] = on_host ? p_all - p_dec : 0;
        } else
            sz[k++] = p_host;
    }
    for (int part = 0; part < 4; part++)
        for (int64_t i = 0; i < m; i++)
            sz[k++] = n_k[i] + (part < 2);
    if (on_device) {
        sz[k++] = b;
        sz[k++] = b;
    }
    /* the context parts only where a prefill request has context: only the ragged context part and the merge
       read them, which such a step never runs (its new part's KV lengths are then the prefill's seq lens) */
    int64_t ctx = 0;
    for (int64_t r = nd; mla_ctx && r < b && !ctx; r++)
        ctx = seq_at(seq, seq_is64, r) > q[r];
    if (ctx) {
        sz[k++] = b - nd;
        sz[k++] = b - nd;
        sz[k++] = b - nd + 1;
        sz[k++] = (t_all - nd * q_dec + 3) / 4;      /* the decodes' tokens: q_dec each, checked */
    }
    for (int64_t i = 0; i < k; i++)
        total += sz[i];
    info[0] = t_all;
    info[1] = p_all;
    info[2] = on_host;
    info[3] = on_device;
    info[4] = use_bt;
    info[11] = k;
    info[30] = info[31] = 0;
    if (total > cap)
        return total;
    int64_t got[9];
    fill(q, seq, seq_is64, b, nd, page, width, t_all, p_host, on_device, use_bt ? bt : NULL, h, got);
    for (int i = 0; i < 6; i++)
        info[5 + i] = got[3 + i];
    if (ctx)
        fill_context(q, seq, seq_is64, b, nd, h + total - sz[k - 1] - sz[k - 2] - sz[k - 3] - sz[k - 4], info);
    return total;
}

#ifdef __cplusplus
}
#endif
