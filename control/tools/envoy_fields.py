import sys,glob
data=open(glob.glob('/root/.cargo/registry/src/*/envoy-types-0.7.7/src/generated/types.bin')[0],'rb').read()
def varint(b,i):
    r=0;s=0
    while True:
        c=b[i];i+=1;r|=(c&0x7f)<<s;s+=7
        if c<0x80: return r,i
def fields(b):
    i=0;out=[]
    while i<len(b):
        k,i=varint(b,i);f,w=k>>3,k&7
        if w==0: v,i=varint(b,i)
        elif w==2:
            l,i=varint(b,i);v=b[i:i+l];i+=l
        elif w==1: v=b[i:i+8];i+=8
        elif w==5: v=b[i:i+4];i+=4
        else: raise Exception(w)
        out.append((f,v))
    return out
table={}
def msg(b,prefix):
    fs=fields(b)
    name=[v.decode() for f,v in fs if f==1][0]
    full=prefix+'.'+name
    names=[]
    for f,v in fs:
        if f==2:
            names.append([x.decode() for g,x in fields(v) if g==1][0])
        elif f==3: msg(v,full)
    table[full]=names
for f,v in fields(data):
    if f!=1: continue
    fs=fields(v)
    pkg=[x.decode() for g,x in fs if g==2]
    pkg=pkg[0] if pkg else ''
    for g,x in fs:
        if g==4: msg(x,pkg)
want=('envoy.config.cluster.v3.','envoy.config.listener.v3.','envoy.config.endpoint.v3.','envoy.config.core.v3.',
 'envoy.extensions.filters.network.redis_proxy.v3.','envoy.extensions.clusters.redis.v3.','envoy.extensions.health_checkers.redis.v3.',
 'envoy.extensions.transport_sockets.tls.v3.','envoy.type.v3.','envoy.extensions.load_balancing_policies.','envoy.config.bootstrap.v3.Bootstrap',
 'envoy.extensions.filters.listener.tls_inspector.v3.','envoy.extensions.common.dynamic_forward_proxy.v3.DnsCacheConfig')
out=[]
for k in sorted(table):
    if k.startswith(want) and table[k]:
        out.append(k+' '+' '.join(table[k]))
open(sys.argv[1],'w').write('\n'.join(out)+'\n')
print(len(out))
