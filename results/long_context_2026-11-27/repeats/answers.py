# what the extended models answer to passkey prompts (greedy, 8 tokens after the question)
import random, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from hfpretrain.eval.long_context import passkey_prompt
tok = AutoTokenizer.from_pretrained("out/tok_bpe8k")
for run in sys.argv[1:]:
    model = AutoModelForCausalLM.from_pretrained(f"runs/{run}/final", dtype=torch.bfloat16).cuda().eval()
    rng = random.Random(0)
    for length in (1024, 4096, 16384):
        for depth in (0.1, 0.5, 0.9):
            key = str(rng.randint(10000, 99999))
            ids, answer = passkey_prompt(tok, length, depth, key)
            x = torch.tensor([ids[:-len(answer)]], device="cuda")
            out = model.generate(x, max_new_tokens=8, do_sample=False, use_cache=True)
            print(run, length, depth, key, repr(tok.decode(out[0, x.shape[1]:])), flush=True)
