# The one list of lav's kernel families and of their CUDA rows.
#
# A family is its files under kernels/<f>/ (its CPU rows in <f>_rows.cpp), reference/<f>.*,
# src/harness/<f>_family.cpp (its declaration) and tests/{kernels,reference}/<f>_*_test.cpp (what
# is particular to it); adding its name to LAV_FAMILIES builds, registers and tests it, the
# generic suite of tests/families/ included. A family in LAV_CUDA_ROWS also has CUDA
# rows, defined in kernels/<f>/<f>_op.cpp (its kernels in kernels/<f>/<f>.cu, or shared ones in
# kernels/common/cuda/), built and registered in CUDA builds only; liblav_ops.so makes a PyTorch
# op of each.
set(LAV_FAMILIES
    simple_gla
    gla
    hgrn
    delta_rule
    gated_delta_rule
    kda
    rwkv6
    rwkv7
    comba
    gated_delta_product
    mesa_net
    based
    rebased
    gsa
)
set(LAV_CUDA_ROWS
    simple_gla
    gla
    hgrn
    delta_rule
    gated_delta_rule
    kda
)
