#!/bin/bash
# Device calls 1, 2 and 3: keep the carried wheels (mlx-cuda travels in three parts of <= 30 MiB) on the warm machine.
mkdir -p $HOME/parts
cp .whl/* $HOME/parts/ 2>/dev/null
ls -la $HOME/parts
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader
