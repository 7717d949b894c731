/*
 * classxent.c — the class-factored softmax crossentropy of an RNN language
 * model (Goodman's classes as RNNLM uses them), as one fused op, and the
 * helper op its pullback is built from.
 *
 * class_xent(h, Wc, Ws, cls, tgt, owner) -> loss (T)
 *   h     (T, H)  hidden states, one row per predicted word
 *   Wc    (C, H)  class weights: class logits of row t are Wc . h[t]
 *   Ws    (K, H)  the word-weight rows the T predictions need, gathered by
 *                 the caller (Ws = Ww[rows]): only these rows are touched,
 *                 so the graph's update of Ww is an inc_subtensor on them
 *   cls   (T)     1-based class of each target word
 *   tgt   (T)     1-based row of Ws holding each target word
 *   owner (K)     1-based row of h that row j of Ws belongs to: row t's
 *                 word softmax runs over { j : owner[j] == t }, its class
 *   loss[t] = -log softmax(Wc h[t])[cls[t]] - log softmax_{owner j = t}(Ws[j] . h[t])[tgt[t]]
 * Both softmaxes subtract their maximum, in double.
 *
 * class_xent_delta(h, Wc, Ws, cls, tgt, owner), p.i[0] = part: the pieces
 * of the pullback, each for an output gradient of 1 on every row (the
 * pullback scales them by the real one), with D the word deltas
 * softmax over t's rows - onehot(tgt[t]):
 *   part 0: (T, C)      softmax(Wc h[t]) - onehot(cls[t])   (d loss[t] / d class logits)
 *   part 1: (T + K, H)  rows 1..T: sum over t's rows j of D[j] Ws[j]
 *                       (the word part of d loss[t] / d h[t]); rows T+1..T+K:
 *                       D[j] h[owner[j]] (d loss / d Ws[j])
 * Part 1 visits only the K gathered rows, once.  The pullback
 * finishes with ordinary ops (gemm with Wc and h for the class part, a
 * row-wise product with the output gradient), so Rop gets the pushforward
 * from the transposed pullback, which only needs the derivative in the
 * output gradient.  The delta itself has no pullback (second derivatives
 * of class_xent are not implemented: asking for one is a clear error).
 *
 * class_xent_sgd(h, Wc, Ww, cls, tgt, owner, rows, lr, beta): RNNLM's
 * output layer trained one word at a time (the -output-update word mode of
 * examples/rnnlm.lua, tgl.lm.class_xent_sgd), a training step rather than
 * a function to differentiate:
 *   Ww    (V, H)  the whole word matrix, read in place: row j of the
 *                 rows of t is Ww[rows[j]] (no gathered copy)
 *   rows  (K)     1-based row of Ww of each of the K word rows; h, Wc,
 *                 cls, tgt, owner as class_xent (tgt and owner index
 *                 into these K rows)
 *   lr    ()      the learning rate; beta (T): the L2 decay at word t
 *                 (RNNLM decays every 10th word: beta there, 0 elsewhere)
 * For t = 1..T in order, with the weights as the words before t left them:
 * the class and word softmaxes of h[t] give loss[t] (as class_xent) and
 * the deltas dc (C), dw (t's rows); the hidden error is
 * e[t] = Wc' dc + Ws' dw (the weights before t's update, as RNNLM's
 * matrixXvector runs before its update loop); then every class row and
 * every row of t's class becomes w (1 - lr beta[t]) - lr d h[t].
 * Output (T + C + K, H + 1), packed (one output, so the update of Ww is
 * an ordinary inc_subtensor, run in Ww's buffer):
 *   rows 1..T:       e[t] in columns 1..H, loss[t] in column H+1
 *   rows T+1..T+C:   the change of Wc over the T words (column H+1: 0)
 *   rows T+C+1..:    the change of Ww[rows[j]] over the T words on the
 *                    first j naming that row, 0 on the others (so
 *                    inc_subtensor(Ww[rows], .) applies it once)
 * It has no pullback (asking for one is a clear error).
 * The kernels are the backends' (src/cpu/kernels/classxent.c on the CPU;
 * the CUDA backend has none for class_xent_sgd: a clear compile error).
 */
#include "engine/ops/ops.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>

static bool is_int_vec(tgl_type t)
{
    return t.ndim == 1 && (t.dtype == TGL_INT32 || t.dtype == TGL_INT64);
}

static tgl_status cx_check(tgl_ctx *ctx, tgl_node *n)
{
    tgl_type h = n->in[0]->type, wc = n->in[1]->type, ws = n->in[2]->type;
    TGL_CHECK(h.ndim == 2 && tgl_dtype_is_float(h.dtype), TGL_EDTYPE,
              "h must be a float matrix (rows, hidden), got a %d-d %s", h.ndim,
              tgl_dtype_name(h.dtype));
    TGL_CHECK(wc.ndim == 2 && wc.dtype == h.dtype, TGL_EDTYPE,
              "the class weights must be a %s matrix (classes, hidden)", tgl_dtype_name(h.dtype));
    TGL_CHECK(ws.ndim == 2 && ws.dtype == h.dtype, TGL_EDTYPE,
              "the word rows must be a %s matrix (rows, hidden)", tgl_dtype_name(h.dtype));
    static const char *const what[3] = {"classes", "targets", "owners"};
    for (int k = 0; k < 3; k++)
        TGL_CHECK(is_int_vec(n->in[3 + k]->type), TGL_EDTYPE,
                  "the %s (input %d) must be an int32 or int64 vector", what[k], 4 + k);
    return TGL_OK;
}

static tgl_status cx_infer(tgl_ctx *ctx, tgl_node *n)
{
    tgl_status st = cx_check(ctx, n);
    if (st)
        return st;
    TGL_CHECK(n->p.n == 0, TGL_EINVAL, "takes no parameters");
    n->type = tgl_type_make(n->in[0]->type.dtype, 1, 0);
    return TGL_OK;
}

static tgl_status delta_infer(tgl_ctx *ctx, tgl_node *n)
{
    tgl_status st = cx_check(ctx, n);
    if (st)
        return st;
    TGL_CHECK(n->p.n == 1 && (n->p.i[0] == 0 || n->p.i[0] == 1), TGL_EINVAL,
              "takes one parameter, the part (0: classes, 1: hidden and word rows)");
    n->type = tgl_type_make(n->in[0]->type.dtype, 2, 0);
    return TGL_OK;
}

/* Shapes agree: h (T,H), Wc (C,H), Ws (K,H), cls and tgt (T), owner (K). */
static tgl_status cx_shapes(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in)
{
    int64_t T = in[0]->shape[0], H = in[0]->shape[1];
    if (in[1]->shape[1] != H || in[2]->shape[1] != H)
        return tgl_op_error(ctx, n, in, TGL_ESHAPE,
                            "h has %" PRId64 " columns but the class weights %" PRId64
                            " and the word rows %" PRId64,
                            H, in[1]->shape[1], in[2]->shape[1]);
    if (in[3]->shape[0] != T || in[4]->shape[0] != T)
        return tgl_op_error(ctx, n, in, TGL_ESHAPE,
                            "%" PRId64 " classes and %" PRId64 " targets for %" PRId64 " rows",
                            in[3]->shape[0], in[4]->shape[0], T);
    if (in[5]->shape[0] != in[2]->shape[0])
        return tgl_op_error(ctx, n, in, TGL_ESHAPE, "%" PRId64 " owners for %" PRId64 " word rows",
                            in[5]->shape[0], in[2]->shape[0]);
    if (in[1]->shape[0] < 1)
        return tgl_op_error(ctx, n, in, TGL_ESHAPE, "needs at least one class");
    return TGL_OK;
}

static tgl_status cx_shape(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in, int64_t *shape)
{
    tgl_status st = cx_shapes(ctx, n, in);
    shape[0] = in[0]->shape[0];
    return st;
}

static tgl_status delta_shape(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                              int64_t *shape)
{
    tgl_status st = cx_shapes(ctx, n, in);
    shape[0] = in[0]->shape[0] + (n->p.i[0] == 1 ? in[2]->shape[0] : 0);
    shape[1] = n->p.i[0] == 0 ? in[1]->shape[0] : in[0]->shape[1];
    return st;
}

static tgl_node *mk_dot(tgl_ctx *ctx, tgl_node *a, tgl_node *b)
{
    return tgl_mk2(ctx, TGL_OP_DOT, a, b);
}

static tgl_node *transposed(tgl_ctx *ctx, tgl_node *x)
{
    int64_t order[2] = {1, 0};
    return tgl_mk_dimshuffle(ctx, x, 2, order);
}

/* With the output gradient g (one value per row):
 *   gh  = (part0 * g) . Wc + part1 * g      (row-wise)
 *   gWc = (part0 * g)' . h
 *   gWs = part2 * g[owner]                  (only the K gathered rows) */
static tgl_status cx_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *g, tgl_node **gin)
{
    tgl_node *h = n->in[0], *wc = n->in[1], *owner = n->in[5];
    for (int i = 0; i < n->nin; i++)
        gin[i] = NULL;
    tgl_node *part[2];
    for (int k = 0; k < 2; k++) {
        tgl_params p = {0};
        p.n = 1;
        p.i[0] = k;
        part[k] = tgl_mk(ctx, TGL_OP_CLASS_XENT_DELTA, n->nin, n->in, &p);
    }
    int64_t col[2] = {0, -1};
    tgl_node *gcol = tgl_mk_dimshuffle(ctx, g, 2, col);
    tgl_node *dc = tgl_mk2(ctx, TGL_OP_MUL, part[0], gcol);
    tgl_params ip = {0};
    ip.n = 1;
    ip.i[0] = 1;
    tgl_node *gin_[2] = {g, owner};
    tgl_node *g_own = tgl_mk_dimshuffle(ctx, tgl_mk(ctx, TGL_OP_ADV_SUBTENSOR, 2, gin_, &ip), 2, col);
    /* part 1's first T rows and the rest */
    tgl_params ap = {0};
    ap.n = 1;
    tgl_node *nrows = tgl_mk(ctx, TGL_OP_AXES_SIZE, 1, &h, &ap);
    tgl_params sp = {0};
    sp.n = 4;
    sp.i[0] = TGL_IDX_SLICE | TGL_IDX_NO_START | TGL_IDX_STOP_INPUT;
    sp.i[3] = 1;
    tgl_node *sin[2] = {part[1], nrows};
    tgl_node *hw = tgl_mk(ctx, TGL_OP_SUBTENSOR, 2, sin, &sp);
    sp.i[0] = TGL_IDX_SLICE | TGL_IDX_START_INPUT | TGL_IDX_NO_STOP;
    tgl_node *wsg = tgl_mk(ctx, TGL_OP_SUBTENSOR, 2, sin, &sp);
    gin[0] = tgl_mk2(ctx, TGL_OP_ADD, mk_dot(ctx, dc, wc), tgl_mk2(ctx, TGL_OP_MUL, hw, gcol));
    gin[1] = mk_dot(ctx, transposed(ctx, dc), h);
    gin[2] = tgl_mk2(ctx, TGL_OP_MUL, wsg, g_own);
    return TGL_OK;
}

/* class_xent_sgd: h, Wc, Ww float of one dtype; cls, tgt, owner, rows
 * integer vectors; lr a scalar and beta a vector of h's dtype. */
static tgl_status sgd_infer(tgl_ctx *ctx, tgl_node *n)
{
    tgl_status st = cx_check(ctx, n);
    if (st)
        return st;
    tgl_type lr = n->in[7]->type, beta = n->in[8]->type, h = n->in[0]->type;
    TGL_CHECK(is_int_vec(n->in[6]->type), TGL_EDTYPE,
              "the rows (input 7) must be an int32 or int64 vector");
    TGL_CHECK(lr.ndim == 0 && lr.dtype == h.dtype, TGL_EDTYPE,
              "the learning rate (input 8) must be a %s scalar", tgl_dtype_name(h.dtype));
    TGL_CHECK(beta.ndim == 1 && beta.dtype == h.dtype, TGL_EDTYPE,
              "the decay (input 9) must be a %s vector (one per row of h)",
              tgl_dtype_name(h.dtype));
    TGL_CHECK(n->p.n == 0, TGL_EINVAL, "takes no parameters");
    n->type = tgl_type_make(h.dtype, 2, 0);
    return TGL_OK;
}

static tgl_status sgd_shape(tgl_ctx *ctx, const tgl_node *n, tgl_array *const *in,
                            int64_t *shape)
{
    int64_t T = in[0]->shape[0], H = in[0]->shape[1], K = in[5]->shape[0];
    shape[0] = T + in[1]->shape[0] + K;
    shape[1] = H + 1;
    if (in[1]->shape[1] != H || in[2]->shape[1] != H)
        return tgl_op_error(ctx, n, in, TGL_ESHAPE,
                            "h has %" PRId64 " columns but the class weights %" PRId64
                            " and the word matrix %" PRId64,
                            H, in[1]->shape[1], in[2]->shape[1]);
    if (in[3]->shape[0] != T || in[4]->shape[0] != T || in[8]->shape[0] != T)
        return tgl_op_error(ctx, n, in, TGL_ESHAPE,
                            "%" PRId64 " classes, %" PRId64 " targets and %" PRId64
                            " decays for %" PRId64 " rows",
                            in[3]->shape[0], in[4]->shape[0], in[8]->shape[0], T);
    if (in[6]->shape[0] != K)
        return tgl_op_error(ctx, n, in, TGL_ESHAPE, "%" PRId64 " owners but %" PRId64 " rows",
                            K, in[6]->shape[0]);
    if (in[1]->shape[0] < 1)
        return tgl_op_error(ctx, n, in, TGL_ESHAPE, "needs at least one class");
    return TGL_OK;
}

static tgl_status sgd_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *g, tgl_node **gin)
{
    (void)g, (void)gin;
    return tgl_ctx_set_error(ctx, TGL_EINVAL,
                             "%s is a training step (RNNLM's per-word update), not "
                             "differentiable: differentiate class_xent instead",
                             tgl_op_name(n->op));
}

static tgl_status delta_grad(tgl_ctx *ctx, tgl_node *n, tgl_node *g, tgl_node **gin)
{
    (void)g, (void)gin;
    return tgl_ctx_set_error(ctx, TGL_EINVAL,
                             "%s: second derivatives of class_xent are not implemented",
                             tgl_op_name(n->op));
}

const tgl_opimpl tgl_impl_class_xent = {
    .family = TGL_FAM_NNET,
    .nin_min = 6,
    .nin_max = 6,
    .infer = cx_infer,
    .shape = cx_shape,
    .grad = cx_grad,
};

const tgl_opimpl tgl_impl_class_xent_delta = {
    .family = TGL_FAM_NNET,
    .nin_min = 6,
    .nin_max = 6,
    .infer = delta_infer,
    .shape = delta_shape,
    .grad = delta_grad,
};

const tgl_opimpl tgl_impl_class_xent_sgd = {
    .family = TGL_FAM_NNET,
    .nin_min = 9,
    .nin_max = 9,
    .infer = sgd_infer,
    .shape = sgd_shape,
    .grad = sgd_grad,
};
