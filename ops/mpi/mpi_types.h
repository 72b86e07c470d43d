// Mapping Accord's dtypes and reduce ops onto MPI datatypes and MPI_Ops.
//
// MPI has built-in types and operations for every integer and 32/64-bit float dtype.
// It has no 16-bit floats: float16 and bfloat16 travel as MPI_UINT16_T and are reduced
// by user-defined, commutative MPI_Ops that call the CPU kernels, one per (op, dtype).
// Those are created once and must be freed before MPI_Finalize, by the pair below.
#pragma once

#include <accord/accord.h>
#include <mpi.h>

namespace accord {

MPI_Datatype mpiDatatype(DType dtype);

// The MPI_Op that reduces `dtype` with `op`; Average maps to a sum (the caller divides).
// For float16/bfloat16 the custom ops are created on first use if initMpiOps() has
// not been called yet. Only the background thread may call this.
MPI_Op mpiOp(ReduceOp op, DType dtype);

// Creates the custom MPI_Ops (after MPI_Init). Idempotent.
void initMpiOps();
// Frees them (before MPI_Finalize). Idempotent; initMpiOps() may be called again later.
void freeMpiOps();

}  // namespace accord
