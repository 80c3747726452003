# The kernel families of this build, one per line. A family is its files under kernels/<f>/,
# reference/<f>.*, src/harness/<f>_family.cpp and tests/{kernels,reference}/<f>_*_test.cpp;
# adding its name here builds, registers and tests it.
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
