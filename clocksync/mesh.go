package clocksync

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/mat"
)

// Edge is one measurement between two nodes of the probe graph: the value
// of node To minus node From, such as a clock offset in ns or a drift, with
// its standard error Err (> 0), which weighs the edge by 1/Err².
type Edge struct {
	From, To int
	Value    float64
	Err      float64
}

// MeshSolution holds node values relative to the root, whose value is 0.
// Nodes that no chain of edges joins to the root have no value: they are
// NaN in every per-node slice and false in Connected.
type MeshSolution struct {
	// Value is each node's value minus the root's.
	Value []float64
	// Err is the standard error of each Value; 0 for the root.
	Err []float64
	// Residual is, per edge, the measured Value minus the solved
	// Value[To]-Value[From]; NaN for edges outside the root's component.
	Residual []float64
	// NodeResidual is, per node, the root mean square of the residuals of
	// the edges that touch it; 0 for a connected node with no edges.
	NodeResidual []float64
	// Connected says which nodes share the root's component.
	Connected []bool
}

// SolveMesh finds the node values x that best explain the edges in the
// weighted least-squares sense, minimising the sum over edges of
// (Value - (x[To] - x[From]))² / Err², with x[root] = 0. This is the
// network effect: every loop in the probe graph must sum to zero, so an
// edge whose measurement disagrees with the paths around it is outvoted,
// and its error is spread thinly over the mesh instead of landing whole on
// one pair of nodes. What stays on the edge is its leverage times its
// error, and leverages average (nodes-1)/edges: about 2/k when each node
// probes k others, so halving a bad edge's error takes k of 4 or more.
//
// The normal equations are L x = Bᵀ W v, with L the weighted Laplacian of
// the root's connected component, B its incidence matrix and W the edge
// weights; dropping the root's row and column leaves a positive definite
// system, solved by Cholesky. Parallel edges, measured in either direction,
// simply add their weights.
//
// Err[j] is sqrt((L⁻¹)[j][j] * s2). With dof = edges - (nodes - 1) in the
// component, s2 = max(1, sum of residual²/Err² / dof) when dof > 0, and 1
// otherwise: the edge errors propagated through the mesh, inflated when the
// residuals show the stated errors to be too small, never shrunk.
//
// It is an error for n to be below 1, for root or an edge's end to be out
// of range, for an edge to join a node to itself, for an edge's Value or
// Err to be NaN or infinite, or its Err not positive or so far from 1 that
// 1/Err² is 0 or infinite, and for the system to be too ill-conditioned to
// solve (weights apart by a factor near 1e16).
func SolveMesh(n int, edges []Edge, root int) (MeshSolution, error) {
	if err := checkMesh(n, edges, root); err != nil {
		return MeshSolution{}, err
	}
	sol := MeshSolution{
		Value:        meshNaNs(n),
		Err:          meshNaNs(n),
		Residual:     meshNaNs(len(edges)),
		NodeResidual: meshNaNs(n),
		Connected:    meshComponent(n, edges, root),
	}
	// col maps each connected node other than the root to its row and
	// column of the reduced system, and every other node to -1.
	col := make([]int, n)
	m := 0
	for j := range n {
		col[j] = -1
		if sol.Connected[j] && j != root {
			col[j] = m
			m++
		}
	}
	sol.Value[root], sol.Err[root] = 0, 0
	var variance []float64
	if m > 0 {
		var err error
		if variance, err = solveReduced(edges, col, m, &sol); err != nil {
			return MeshSolution{}, fmt.Errorf("solve mesh of %d nodes from root %d: %w", m+1, root, err)
		}
	}
	s2 := meshResiduals(edges, &sol)
	for j, c := range col {
		if c >= 0 {
			sol.Err[j] = math.Sqrt(variance[c] * s2)
		}
	}
	return sol, nil
}

// checkMesh returns an error describing the first thing wrong with the
// arguments of SolveMesh, or nil.
func checkMesh(n int, edges []Edge, root int) error {
	if n < 1 {
		return fmt.Errorf("solve mesh: %d nodes, need at least 1", n)
	}
	if root < 0 || root >= n {
		return fmt.Errorf("solve mesh: root %d out of range [0, %d)", root, n)
	}
	for i, e := range edges {
		switch {
		case e.From < 0 || e.From >= n || e.To < 0 || e.To >= n:
			return fmt.Errorf("solve mesh: edge %d joins %d to %d, out of range [0, %d)", i, e.From, e.To, n)
		case e.From == e.To:
			return fmt.Errorf("solve mesh: edge %d joins node %d to itself", i, e.From)
		case math.IsNaN(e.Value) || math.IsInf(e.Value, 0):
			return fmt.Errorf("solve mesh: edge %d (%d to %d) has value %g", i, e.From, e.To, e.Value)
		case math.IsNaN(e.Err) || math.IsInf(e.Err, 0) || e.Err <= 0:
			return fmt.Errorf("solve mesh: edge %d (%d to %d) has standard error %g, need a finite value > 0", i, e.From, e.To, e.Err)
		}
		if w := meshWeight(e); w == 0 || math.IsInf(w, 0) {
			return fmt.Errorf("solve mesh: edge %d (%d to %d) has standard error %g, whose weight 1/Err² is not representable", i, e.From, e.To, e.Err)
		}
	}
	return nil
}

// meshWeight returns the least-squares weight of an edge, 1/Err².
func meshWeight(e Edge) float64 {
	return 1 / (e.Err * e.Err)
}

// meshNaNs returns a slice of n NaNs.
func meshNaNs(n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = math.NaN()
	}
	return s
}

// meshComponent reports which nodes the edges join to root, by a
// breadth-first search that ignores the edges' direction.
func meshComponent(n int, edges []Edge, root int) []bool {
	adj := make([][]int, n)
	for _, e := range edges {
		adj[e.From] = append(adj[e.From], e.To)
		adj[e.To] = append(adj[e.To], e.From)
	}
	seen := make([]bool, n)
	seen[root] = true
	queue := []int{root}
	for len(queue) > 0 {
		j := queue[0]
		queue = queue[1:]
		for _, k := range adj[j] {
			if !seen[k] {
				seen[k] = true
				queue = append(queue, k)
			}
		}
	}
	return seen
}

// solveReduced builds and solves the reduced Laplacian system of the m
// non-root nodes that col numbers, writes their values into sol.Value, and
// returns the diagonal of the system's inverse, their variances before
// scaling, in the order of col.
func solveReduced(edges []Edge, col []int, m int, sol *MeshSolution) ([]float64, error) {
	lap := mat.NewSymDense(m, nil)
	rhs := mat.NewVecDense(m, nil)
	for _, e := range edges {
		if !sol.Connected[e.From] {
			continue
		}
		w := meshWeight(e)
		f, t := col[e.From], col[e.To]
		if f >= 0 {
			lap.SetSym(f, f, lap.At(f, f)+w)
			rhs.SetVec(f, rhs.AtVec(f)-w*e.Value)
		}
		if t >= 0 {
			lap.SetSym(t, t, lap.At(t, t)+w)
			rhs.SetVec(t, rhs.AtVec(t)+w*e.Value)
		}
		if f >= 0 && t >= 0 {
			lap.SetSym(f, t, lap.At(f, t)-w)
		}
	}
	var chol mat.Cholesky
	if !chol.Factorize(lap) {
		return nil, fmt.Errorf("reduced Laplacian is not positive definite")
	}
	var x mat.VecDense
	if err := chol.SolveVecTo(&x, rhs); err != nil {
		return nil, fmt.Errorf("solve reduced Laplacian: %w", err)
	}
	var inv mat.SymDense
	if err := chol.InverseTo(&inv); err != nil {
		return nil, fmt.Errorf("invert reduced Laplacian: %w", err)
	}
	variance := make([]float64, m)
	for j, c := range col {
		if c >= 0 {
			sol.Value[j] = x.AtVec(c)
			variance[c] = inv.At(c, c)
		}
	}
	return variance, nil
}

// meshResiduals fills in the residuals of the edges and nodes of the root's
// component and returns s2, the factor by which the goodness of fit scales
// the propagated variances.
func meshResiduals(edges []Edge, sol *MeshSolution) float64 {
	n := len(sol.Value)
	sumSq := make([]float64, n)
	count := make([]int, n)
	chi2 := 0.0
	used := 0
	for i, e := range edges {
		if !sol.Connected[e.From] {
			continue
		}
		r := e.Value - (sol.Value[e.To] - sol.Value[e.From])
		sol.Residual[i] = r
		chi2 += r * r * meshWeight(e)
		used++
		for _, j := range []int{e.From, e.To} {
			sumSq[j] += r * r
			count[j]++
		}
	}
	nodes := 0
	for _, c := range sol.Connected {
		if c {
			nodes++
		}
	}
	s2 := 1.0
	if dof := used - (nodes - 1); dof > 0 {
		s2 = max(1, chi2/float64(dof))
	}
	for j := range n {
		if !sol.Connected[j] {
			continue
		}
		sol.NodeResidual[j] = 0
		if count[j] > 0 {
			sol.NodeResidual[j] = math.Sqrt(sumSq[j] / float64(count[j]))
		}
	}
	return s2
}
