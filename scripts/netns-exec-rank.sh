#!/bin/sh
# mpirun helper for scripts/bench-collective.sh: runs one MPI rank inside its network namespace
# (${NETNS_PREFIX}r<rank>); rank 0 also gets the extra arguments in NETNS_RANK0_ARGS.
if [ "${OMPI_COMM_WORLD_RANK:-0}" = 0 ]; then
  # shellcheck disable=SC2086
  exec ip netns exec "${NETNS_PREFIX}r0" "$@" ${NETNS_RANK0_ARGS:-}
fi
exec ip netns exec "${NETNS_PREFIX}r${OMPI_COMM_WORLD_RANK}" "$@" > /dev/null
