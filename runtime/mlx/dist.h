// The C ABI of MLX's distributed layer (mlx::core::distributed), with the
// conventions of shim.h: a status and a malloc'd message, no C++ exception
// crossing it.
#ifndef ARCHGEN_MLX_DIST_H
#define ARCHGEN_MLX_DIST_H

#include "shim.h"

#ifdef __cplusplus
extern "C" {
#endif

// A handle on a group of processes; freed with mlxg_group_free.
typedef struct mlxg_group_ {
  void* ctx;
} mlxg_group;

// Whether libmlx was built with backend ("any", "ring", "mpi", "nccl",
// "jaccl").
int mlxg_dist_is_available(const char* backend);
// The group of every process the backend finds (from MLX_RANK,
// MLX_HOSTFILE and the like). strict fails when it finds none; otherwise a
// lone process gets a group of size 1.
int mlxg_dist_init(mlxg_group* res, bool strict, const char* backend, char** err);
void mlxg_group_free(mlxg_group g);
int mlxg_group_rank(mlxg_group g);
int mlxg_group_size(mlxg_group g);

// Collectives, as graph ops on stream s.
int mlxg_all_sum(mlxg_array* res, mlxg_array x, mlxg_group g, mlxg_stream s, char** err);
int mlxg_all_gather(mlxg_array* res, mlxg_array x, mlxg_group g, mlxg_stream s, char** err);
int mlxg_all_max(mlxg_array* res, mlxg_array x, mlxg_group g, mlxg_stream s, char** err);
// The result of send is an empty-bodied array to evaluate for the send to happen.
int mlxg_send(mlxg_array* res, mlxg_array x, int dst, mlxg_group g, mlxg_stream s, char** err);
int mlxg_recv(mlxg_array* res, const int32_t* shape, int ndim, int dtype, int src, mlxg_group g,
              mlxg_stream s, char** err);

#ifdef __cplusplus
}
#endif

#endif
