/* bytecount: a PMPI interposition library that counts the bytes each MPI call moves.
 *
 * Loaded with LD_PRELOAD, it wraps the MPI calls distsdfg and the benchmark's hand-written
 * versions make and adds up, per call name, the number of calls and the bytes this rank sends
 * and receives, by the convention of distsdfg.comm_report: the logical payload of the call,
 * data a rank keeps for itself excluded.
 *
 *   Bcast            root sends count to each other member; the others receive count
 *   Scatterv         root sends every other member's count; a member receives its count
 *   Ibcast, Iscatterv   counted as Bcast and Scatterv (the same payload, nonblocking)
 *   Gatherv          a member sends its count; root receives every other member's count
 *   Reduce           a member sends count; root receives count from each other member
 *   Allreduce        a reduce-scatter plus an allgather on an even split of count
 *   Reduce_scatter   a rank sends the others' pieces and receives its piece from each other
 *   Allgatherv       a rank sends its piece to each other and receives the others' pieces
 *   Allgather        counted as Allgatherv (its pieces are of one size; MPI_IN_PLACE too)
 *   Alltoallv/w      the pieces to and from other ranks (type sizes, not extents)
 *   Send/Isend, Recv/Irecv   count times the type's size, messages to oneself excluded
 *
 * Calls on the communicator named with bytecount_set_control() (the benchmark's own control
 * traffic, e.g. the pickled arguments a distsdfg program broadcasts) are counted apart.
 * Each call is wrapped twice: the classic form and the MPI-4 large-count form (``_c``, which
 * mpi4py prefers when the library has it).
 * bytecount_reset() zeroes the counters; bytecount_read() copies them out (ctypes).
 */
#include <mpi.h>
#include <stdint.h>
#include <string.h>

enum { BC_BCAST, BC_SCATTERV, BC_GATHERV, BC_REDUCE, BC_ALLREDUCE, BC_REDUCE_SCATTER, BC_ALLGATHERV,
       BC_ALLTOALLV, BC_ALLTOALLW, BC_SEND, BC_ISEND, BC_RECV, BC_IRECV, BC_N };

static const char* const names[BC_N] = {"Bcast", "Scatterv", "Gatherv", "Reduce", "Allreduce", "Reduce_scatter",
                                        "Allgatherv", "Alltoallv", "Alltoallw", "Send", "Isend", "Recv", "Irecv"};
/* [0]: data calls, [1]: calls on the control communicator */
static uint64_t calls[2][BC_N], sent[2][BC_N], received[2][BC_N];
static MPI_Comm control = MPI_COMM_NULL;

int bytecount_n(void) { return BC_N; }
const char* bytecount_name(int i) { return (i >= 0 && i < BC_N) ? names[i] : ""; }

void bytecount_reset(void) {
    memset(calls, 0, sizeof calls);
    memset(sent, 0, sizeof sent);
    memset(received, 0, sizeof received);
}

/* Copies out 2 x BC_N counters each: data calls first, then control calls. */
void bytecount_read(uint64_t* c, uint64_t* s, uint64_t* r) {
    memcpy(c, calls, sizeof calls);
    memcpy(s, sent, sizeof sent);
    memcpy(r, received, sizeof received);
}

/* Counts calls on this communicator (a Fortran handle, as mpi4py's Comm.py2f() gives) apart. */
void bytecount_set_control(MPI_Fint comm) { control = MPI_Comm_f2c(comm); }

static uint64_t tsize(MPI_Datatype t) {
    int n = 0;
    PMPI_Type_size(t, &n);
    return (uint64_t)n;
}

static void me_of(MPI_Comm comm, int* me, int* k) {
    PMPI_Comm_rank(comm, me);
    PMPI_Comm_size(comm, k);
}

static void add(MPI_Comm comm, int which, uint64_t s, uint64_t r) {
    int k = (control != MPI_COMM_NULL && comm == control) ? 1 : 0;
    calls[k][which] += 1;
    sent[k][which] += s;
    received[k][which] += r;
}

/* Sum of counts[i] * size over the members i other than ``skip`` (int and MPI_Count arrays). */
#define SUM_EXCEPT(counts, k, skip, size)                                    \
    ({                                                                       \
        uint64_t sum_ = 0;                                                   \
        for (int i_ = 0; i_ < (k); ++i_)                                     \
            if (i_ != (skip)) sum_ += (uint64_t)(counts)[i_] * (size);       \
        sum_;                                                                \
    })

static void on_bcast(MPI_Comm comm, uint64_t n, int root) {
    int me, k;
    me_of(comm, &me, &k);
    add(comm, BC_BCAST, me == root ? (uint64_t)(k - 1) * n : 0, me == root ? 0 : n);
}

static void on_reduce(MPI_Comm comm, uint64_t n, int root) {
    int me, k;
    me_of(comm, &me, &k);
    add(comm, BC_REDUCE, me == root ? 0 : n, me == root ? (uint64_t)(k - 1) * n : 0);
}

/* A reduce-scatter plus an allgather on an even split of the elements. */
static void on_allreduce(MPI_Comm comm, uint64_t count, uint64_t size) {
    int me, k;
    me_of(comm, &me, &k);
    uint64_t piece = count / (uint64_t)k + ((uint64_t)me < count % (uint64_t)k ? 1 : 0);
    uint64_t b = k > 1 ? (count - piece + (uint64_t)(k - 1) * piece) * size : 0;
    add(comm, BC_ALLREDUCE, b, b);
}

static int not_me(int peer, MPI_Comm comm) {
    int me;
    PMPI_Comm_rank(comm, &me);
    return peer != me && peer != MPI_PROC_NULL;
}

/* The wrappers: CNT is int or MPI_Count, DSP int or MPI_Aint, SFX empty or _c. */
#define WRAP(CNT, DSP, SFX)                                                                                        \
    int MPI_Bcast##SFX(void* buf, CNT count, MPI_Datatype t, int root, MPI_Comm comm) {                            \
        on_bcast(comm, (uint64_t)count * tsize(t), root);                                                          \
        return PMPI_Bcast##SFX(buf, count, t, root, comm);                                                         \
    }                                                                                                              \
    int MPI_Scatterv##SFX(const void* sbuf, const CNT scounts[], const DSP displs[], MPI_Datatype st, void* rbuf,   \
                          CNT rcount, MPI_Datatype rt, int root, MPI_Comm comm) {                                  \
        int me, k;                                                                                                 \
        me_of(comm, &me, &k);                                                                                      \
        if (me == root) add(comm, BC_SCATTERV, SUM_EXCEPT(scounts, k, root, tsize(st)), 0);                        \
        else add(comm, BC_SCATTERV, 0, (uint64_t)rcount * tsize(rt));                                              \
        return PMPI_Scatterv##SFX(sbuf, scounts, displs, st, rbuf, rcount, rt, root, comm);                        \
    }                                                                                                              \
    int MPI_Ibcast##SFX(void* buf, CNT count, MPI_Datatype t, int root, MPI_Comm comm, MPI_Request* req) {        \
        on_bcast(comm, (uint64_t)count * tsize(t), root);                                                          \
        return PMPI_Ibcast##SFX(buf, count, t, root, comm, req);                                                   \
    }                                                                                                              \
    int MPI_Iscatterv##SFX(const void* sbuf, const CNT scounts[], const DSP displs[], MPI_Datatype st, void* rbuf,  \
                           CNT rcount, MPI_Datatype rt, int root, MPI_Comm comm, MPI_Request* req) {               \
        int me, k;                                                                                                 \
        me_of(comm, &me, &k);                                                                                      \
        if (me == root) add(comm, BC_SCATTERV, SUM_EXCEPT(scounts, k, root, tsize(st)), 0);                        \
        else add(comm, BC_SCATTERV, 0, (uint64_t)rcount * tsize(rt));                                              \
        return PMPI_Iscatterv##SFX(sbuf, scounts, displs, st, rbuf, rcount, rt, root, comm, req);                  \
    }                                                                                                              \
    int MPI_Gatherv##SFX(const void* sbuf, CNT scount, MPI_Datatype st, void* rbuf, const CNT rcounts[],            \
                         const DSP displs[], MPI_Datatype rt, int root, MPI_Comm comm) {                           \
        int me, k;                                                                                                 \
        me_of(comm, &me, &k);                                                                                      \
        if (me == root) add(comm, BC_GATHERV, 0, SUM_EXCEPT(rcounts, k, root, tsize(rt)));                         \
        else add(comm, BC_GATHERV, (uint64_t)scount * tsize(st), 0);                                               \
        return PMPI_Gatherv##SFX(sbuf, scount, st, rbuf, rcounts, displs, rt, root, comm);                         \
    }                                                                                                              \
    int MPI_Reduce##SFX(const void* sbuf, void* rbuf, CNT count, MPI_Datatype t, MPI_Op op, int root,              \
                        MPI_Comm comm) {                                                                           \
        on_reduce(comm, (uint64_t)count * tsize(t), root);                                                         \
        return PMPI_Reduce##SFX(sbuf, rbuf, count, t, op, root, comm);                                             \
    }                                                                                                              \
    int MPI_Allreduce##SFX(const void* sbuf, void* rbuf, CNT count, MPI_Datatype t, MPI_Op op, MPI_Comm comm) {    \
        on_allreduce(comm, (uint64_t)count, tsize(t));                                                             \
        return PMPI_Allreduce##SFX(sbuf, rbuf, count, t, op, comm);                                                \
    }                                                                                                              \
    int MPI_Reduce_scatter##SFX(const void* sbuf, void* rbuf, const CNT rcounts[], MPI_Datatype t, MPI_Op op,      \
                                MPI_Comm comm) {                                                                   \
        int me, k;                                                                                                 \
        me_of(comm, &me, &k);                                                                                      \
        add(comm, BC_REDUCE_SCATTER, SUM_EXCEPT(rcounts, k, me, tsize(t)),                                         \
            (uint64_t)(k - 1) * (uint64_t)rcounts[me] * tsize(t));                                                 \
        return PMPI_Reduce_scatter##SFX(sbuf, rbuf, rcounts, t, op, comm);                                         \
    }                                                                                                              \
    int MPI_Allgatherv##SFX(const void* sbuf, CNT scount, MPI_Datatype st, void* rbuf, const CNT rcounts[],        \
                            const DSP displs[], MPI_Datatype rt, MPI_Comm comm) {                                  \
        int me, k;                                                                                                 \
        me_of(comm, &me, &k);                                                                                      \
        uint64_t mine = sbuf == MPI_IN_PLACE ? (uint64_t)rcounts[me] * tsize(rt) : (uint64_t)scount * tsize(st);   \
        add(comm, BC_ALLGATHERV, (uint64_t)(k - 1) * mine, SUM_EXCEPT(rcounts, k, me, tsize(rt)));                 \
        return PMPI_Allgatherv##SFX(sbuf, scount, st, rbuf, rcounts, displs, rt, comm);                            \
    }                                                                                                              \
    int MPI_Allgather##SFX(const void* sbuf, CNT scount, MPI_Datatype st, void* rbuf, CNT rcount, MPI_Datatype rt, \
                           MPI_Comm comm) {                                                                        \
        int me, k;                                                                                                 \
        me_of(comm, &me, &k);                                                                                      \
        uint64_t piece = (uint64_t)rcount * tsize(rt);                                                             \
        add(comm, BC_ALLGATHERV, (uint64_t)(k - 1) * piece, (uint64_t)(k - 1) * piece);                            \
        return PMPI_Allgather##SFX(sbuf, scount, st, rbuf, rcount, rt, comm);                                      \
    }                                                                                                              \
    int MPI_Alltoallv##SFX(const void* sbuf, const CNT scounts[], const DSP sdispls[], MPI_Datatype st, void* rbuf, \
                           const CNT rcounts[], const DSP rdispls[], MPI_Datatype rt, MPI_Comm comm) {             \
        int me, k;                                                                                                 \
        me_of(comm, &me, &k);                                                                                      \
        add(comm, BC_ALLTOALLV, SUM_EXCEPT(scounts, k, me, tsize(st)), SUM_EXCEPT(rcounts, k, me, tsize(rt)));     \
        return PMPI_Alltoallv##SFX(sbuf, scounts, sdispls, st, rbuf, rcounts, rdispls, rt, comm);                  \
    }                                                                                                              \
    int MPI_Alltoallw##SFX(const void* sbuf, const CNT scounts[], const DSP sdispls[], const MPI_Datatype st[],     \
                           void* rbuf, const CNT rcounts[], const DSP rdispls[], const MPI_Datatype rt[],          \
                           MPI_Comm comm) {                                                                        \
        int me, k;                                                                                                 \
        me_of(comm, &me, &k);                                                                                      \
        uint64_t s = 0, r = 0;                                                                                     \
        for (int i = 0; i < k; ++i) {                                                                              \
            if (i == me) continue;                                                                                 \
            if (scounts[i]) s += (uint64_t)scounts[i] * tsize(st[i]);                                              \
            if (rcounts[i]) r += (uint64_t)rcounts[i] * tsize(rt[i]);                                              \
        }                                                                                                          \
        add(comm, BC_ALLTOALLW, s, r);                                                                             \
        return PMPI_Alltoallw##SFX(sbuf, scounts, sdispls, st, rbuf, rcounts, rdispls, rt, comm);                  \
    }                                                                                                              \
    int MPI_Send##SFX(const void* buf, CNT count, MPI_Datatype t, int dest, int tag, MPI_Comm comm) {              \
        add(comm, BC_SEND, not_me(dest, comm) ? (uint64_t)count * tsize(t) : 0, 0);                                \
        return PMPI_Send##SFX(buf, count, t, dest, tag, comm);                                                     \
    }                                                                                                              \
    int MPI_Isend##SFX(const void* buf, CNT count, MPI_Datatype t, int dest, int tag, MPI_Comm comm,               \
                       MPI_Request* req) {                                                                         \
        add(comm, BC_ISEND, not_me(dest, comm) ? (uint64_t)count * tsize(t) : 0, 0);                               \
        return PMPI_Isend##SFX(buf, count, t, dest, tag, comm, req);                                               \
    }                                                                                                              \
    int MPI_Recv##SFX(void* buf, CNT count, MPI_Datatype t, int src, int tag, MPI_Comm comm, MPI_Status* status) { \
        add(comm, BC_RECV, 0, not_me(src, comm) ? (uint64_t)count * tsize(t) : 0);                                 \
        return PMPI_Recv##SFX(buf, count, t, src, tag, comm, status);                                              \
    }                                                                                                              \
    int MPI_Irecv##SFX(void* buf, CNT count, MPI_Datatype t, int src, int tag, MPI_Comm comm, MPI_Request* req) {  \
        add(comm, BC_IRECV, 0, not_me(src, comm) ? (uint64_t)count * tsize(t) : 0);                                \
        return PMPI_Irecv##SFX(buf, count, t, src, tag, comm, req);                                                \
    }

WRAP(int, int, )
WRAP(MPI_Count, MPI_Aint, _c)
