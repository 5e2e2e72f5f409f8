#!/bin/sh
# Installs what training/ needs on Debian 12: the KJV text and its reader (bible-kjv,
# which pulls bible-kjv-text), PyTorch and NumPy from Debian, and a serial OpenBLAS
# (Debian's python3-torch calls the system BLAS; the reference BLAS is ~8x slower).
set -e
apt-get install -y --no-install-recommends bible-kjv python3-torch python3-numpy libopenblas0-serial
