"""PyTorch twin of bench/engine.cpp (MLP step, CNN step, one GPT block, fp32 matmul n=2048).

Reports process CPU milliseconds per iteration (all threads), the measure bench/engine.cpp
reports with MeasureProcessCPUTime, so both can be compared on a shared, loaded machine:
    OMP_NUM_THREADS=1 /usr/bin/python3 bench/engine_peer.py --threads 1
    OMP_NUM_THREADS=1 build/release/mixp_engine --benchmark_filter='Step|Gpt|2048'
"""
import argparse, time, torch, torch.nn.functional as F
ap = argparse.ArgumentParser()
ap.add_argument("--threads", type=int, default=2)
args = ap.parse_args()
torch.manual_seed(0)
torch.set_num_threads(args.threads)
def bench(f, n=10):
    f(); f()
    t = time.process_time()
    for _ in range(n): f()
    return (time.process_time() - t) / n * 1e3
# MLP
w1=(torch.randn(512,784)*0.03).requires_grad_(); b1=torch.zeros(512,requires_grad=True)
w2=(torch.randn(512,512)*0.04).requires_grad_(); b2=torch.zeros(512,requires_grad=True)
w3=(torch.randn(10,512)*0.04).requires_grad_(); b3=torch.zeros(10,requires_grad=True)
x=torch.randn(128,784); y=torch.randint(0,10,(128,))
def mlp():
    h=F.relu(F.linear(x,w1,b1)); h=F.relu(F.linear(h,w2,b2)); F.cross_entropy(F.linear(h,w3,b3),y).backward()
print("torch mlp ms", bench(mlp, 30))
c1=(torch.randn(32,1,3,3)*0.3).requires_grad_(); cb1=torch.zeros(32,requires_grad=True)
c2=(torch.randn(64,32,3,3)*0.06).requires_grad_(); cb2=torch.zeros(64,requires_grad=True)
g1=torch.ones(32,requires_grad=True); be1=torch.zeros(32,requires_grad=True); rm1=torch.zeros(32); rv1=torch.ones(32)
g2=torch.ones(64,requires_grad=True); be2=torch.zeros(64,requires_grad=True); rm2=torch.zeros(64); rv2=torch.ones(64)
lw1=(torch.randn(128,3136)*0.02).requires_grad_(); lb1=torch.zeros(128,requires_grad=True)
lw2=(torch.randn(10,128)*0.09).requires_grad_(); lb2=torch.zeros(10,requires_grad=True)
xi=torch.randn(128,1,28,28)
def cnn():
    h=F.max_pool2d(F.relu(F.batch_norm(F.conv2d(xi,c1,cb1,1,1),rm1,rv1,g1,be1,True)),2)
    h=F.max_pool2d(F.relu(F.batch_norm(F.conv2d(h,c2,cb2,1,1),rm2,rv2,g2,be2,True)),2)
    h=F.relu(F.linear(h.flatten(1),lw1,lb1)); F.cross_entropy(F.linear(h,lw2,lb2),y).backward()
print("torch cnn ms", bench(cnn, 10))
B,T,C,H=16,128,256,4
p=lambda *s: (torch.randn(*s)*0.02).requires_grad_()
ln1w=torch.ones(C,requires_grad=True); ln1b=torch.zeros(C,requires_grad=True); ln2w=torch.ones(C,requires_grad=True); ln2b=torch.zeros(C,requires_grad=True)
wqkv=p(3*C,C); bqkv=torch.zeros(3*C,requires_grad=True); wo=p(C,C); bo=torch.zeros(C,requires_grad=True)
wfc=p(4*C,C); bfc=torch.zeros(4*C,requires_grad=True); wpr=p(C,4*C); bpr=torch.zeros(C,requires_grad=True)
x0=torch.randn(B,T,C)
def gpt():
    x=x0.clone().requires_grad_()
    qkv=F.linear(F.layer_norm(x,(C,),ln1w,ln1b),wqkv,bqkv)
    q,k,v=qkv.split(C,2)
    hd=lambda t: t.reshape(B,T,H,C//H).transpose(1,2)
    q,k,v=hd(q),hd(k),hd(v)
    att=(q@k.transpose(-2,-1))*(1.0/(C//H)**0.5)
    mask=torch.triu(torch.ones(T,T,dtype=torch.bool),1)
    att=att.masked_fill(mask,float('-inf')).softmax(-1)
    a=(att@v).transpose(1,2).reshape(B,T,C)
    x=x+F.linear(a,wo,bo)
    x=x+F.linear(F.gelu(F.linear(F.layer_norm(x,(C,),ln2w,ln2b),wfc,bfc),approximate='tanh'),wpr,bpr)
    x.mean().backward()
print("torch gpt block ms", bench(gpt, 10))
a=torch.randn(2048,2048); b=torch.randn(2048,2048)
t=bench(lambda: a@b, 5); print("torch matmul 2048 cpu ms", t, "GFLOP per cpu-second", 2*2048**3/t/1e6)
