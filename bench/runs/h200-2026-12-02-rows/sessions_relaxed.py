# voicechat bench --sessions with admission's memory share 0.95 for the measurement (32 conversations at the
# 8192-position limit need 81 GB of state; the peak GB column says what the run took)
import sys
import voicechat.group
from voicechat.__main__ import main
voicechat.group.MEMORY_SHARE = 0.95
sys.exit(main(["bench", *sys.argv[1:]]))
