mkdir -p $HOME/parts; cp .whl/* $HOME/parts/ 2>/dev/null; ls -la $HOME/parts; python3 -V
python3 -c 'import numpy, safetensors, tokenizers, soundfile, av, tqdm; print("deps ok")' 2>&1 | tail -1
